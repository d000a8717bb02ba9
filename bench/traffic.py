"""Poisson request traffic through a cluster router, with every request's outcome kept:
attainment over any span, by one-second window, and the time until it settles."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Callable

import numpy as np

from cluster.placement import Workload

TICK_S = 0.02
WINDOW_S = 1.0
TARGET = 0.99


class Traffic:
    """Poisson arrivals of every session through a router, in ticks, on a thread; every
    request's send time and outcome kept for attainment by window. `payload(request
    id)`: what each request carries beside its time left (an engine backend's frame)."""

    def __init__(self, router, workloads: list[Workload], slo_ms: dict[str, float], seed: int,
                 payload: Callable[[int], object] | None = None) -> None:
        self.router = router
        self.payload = payload
        self.rates = {w.session: w.rate_rps for w in workloads}
        self.slo_ms = slo_ms
        self.rng = np.random.default_rng(seed)
        self.t0 = time.monotonic()
        self._lock = threading.Lock()
        self.sent: list[tuple[float, str]] = []  # (send time, session) by request id
        self.done: dict[int, tuple[float, str]] = {}  # request id -> (finish time, outcome)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="traffic", daemon=True)
        self._thread.start()

    def now(self) -> float:
        return time.monotonic() - self.t0

    def set_rate(self, session: str, rate_rps: float) -> None:
        with self._lock:
            self.rates[session] = rate_rps

    def _run(self) -> None:
        next_tick = time.monotonic()
        while not self._stop.is_set():
            with self._lock:
                rates = dict(self.rates)
            for session, rate in rates.items():
                n = int(self.rng.poisson(rate * TICK_S))
                if not n:
                    continue
                now = self.now()
                with self._lock:
                    first = len(self.sent)
                    self.sent.extend((now, session) for _ in range(n))
                items = [(first + i, self.slo_ms[session]) for i in range(n)]
                if self.payload is not None:
                    items = [(rid, left, self.payload(rid)) for rid, left in items]
                for (rid, *_), fut in zip(items, self.router.submit(session, items)):
                    fut.add_done_callback(lambda f, rid=rid: self._finished(rid, f.result()[0]))
            next_tick += TICK_S
            time.sleep(max(0.0, next_tick - time.monotonic()))

    def _finished(self, rid: int, outcome: str) -> None:
        with self._lock:
            self.done[rid] = (self.now(), outcome)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def attainment(self, start_s: float, end_s: float, session: str | None = None) -> tuple[float | None, Counter]:
        """Within-SLO share of the requests sent in [start, end) (of one session, or
        all), and their outcomes."""
        with self._lock:
            sent = list(enumerate(self.sent))
            done = dict(self.done)
        counts: Counter = Counter()
        hits = total = 0
        for rid, (t, of) in sent:
            if not start_s <= t < end_s or (session is not None and of != session):
                continue
            total += 1
            finished = done.get(rid)
            if finished is None:
                counts["no_outcome"] += 1
                continue
            counts[finished[1]] += 1
            hits += finished[1] == "ok" and (finished[0] - t) * 1000.0 <= self.slo_ms[of]
        return (round(hits / total, 5) if total else None), counts

    def by_window(self, start_s: float, end_s: float) -> list[float | None]:
        """Attainment in each whole one-second window from `start_s` to `end_s`."""
        return [self.attainment(start_s + i * WINDOW_S, start_s + (i + 1) * WINDOW_S)[0]
                for i in range(int((end_s - start_s) / WINDOW_S))]

    def settled_after(self, start_s: float, end_s: float) -> float | None:
        """Seconds from `start_s` until every one-second window up to `end_s` is at the
        target (None: never within the phase)."""
        ok = [(a or 0.0) >= TARGET for a in self.by_window(start_s, end_s)]
        for i in range(len(ok)):
            if all(ok[i:]):
                return round(i * WINDOW_S, 2)
        return None
