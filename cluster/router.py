"""A router: where a front door (`vigil serve --cluster`, the cluster bench) sends each
request, by the route tables the scheduler keeps.

Each session has a deficit round robin (cluster/routing.py) over the devices its plan
gave it, weighted by their planned rates. The router fetches the tables again whenever
the scheduler's version moves (it polls every `refresh_s`), and reports the arrival
rate of each session every `report_s`, over the last `rate_window_s`: the observed
rates the scheduler's epochs plan with. Over one beacon, a session of ten requests a
second would read 30% off its rate half the time, and plan after plan would follow
the noise.

`submit` sends a group of requests of one session as one call per device and returns a
future per request, resolved with a tuple: its outcome, then what the backend gave
beside it (an engine backend's result, cluster/engine_backend.py). The outcome is
`ok`, `deadline` (dropped early by the device), `not_here` (a stale table sent it to a
device that no longer runs it), `unrouted` (no device runs the session),
`backend_lost` (its device died with it in flight), `error` (the device's call failed
and the device lives on), or another of the engine's. A lost device is removed from
every route at once, so nothing more is sent there while the scheduler re-places its
sessions; no request waits on a dead device.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from concurrent.futures import Future
from dataclasses import dataclass

from cluster.routing import DeficitRoundRobin, NoRoute

log = logging.getLogger("vigil.cluster")


@dataclass
class _Sent:
    device: str
    futures: list[Future]


class Router:
    def __init__(self, scheduler, router_id: str, refresh_s: float = 0.25, report_s: float = 1.0,
                 rate_window_s: float = 5.0) -> None:
        if not (0.01 <= refresh_s <= 60 and 0.05 <= report_s <= 600 and report_s <= rate_window_s <= 3600):
            raise ValueError("refresh_s must be in [0.01, 60], report_s in [0.05, 600] and rate_window_s in "
                             "[report_s, 3600]")
        self.scheduler = scheduler
        self.router_id = router_id
        self.refresh_s, self.report_s, self.rate_window_s = refresh_s, report_s, rate_window_s
        self.version: int | None = None
        self.outcomes: Counter = Counter()
        self._lock = threading.Lock()
        self._routes: dict[str, DeficitRoundRobin] = {}
        self._handles: dict[str, object] = {}
        self._arrived: Counter = Counter()
        self._pending: dict = {}  # object ref -> _Sent
        self._stop = threading.Event()
        self._sent = threading.Event()  # set when _pending gains a call: the collector sleeps on it
        self.refresh()
        self._threads = [threading.Thread(target=self._refresher, name="router-refresh", daemon=True),
                         threading.Thread(target=self._collector, name="router-collect", daemon=True)]
        for t in self._threads:
            t.start()

    # -- routing ------------------------------------------------------------------------------------
    def refresh(self) -> bool:
        """Fetch the route tables if their version moved; whether it did."""
        import ray

        version, routes, handles = ray.get(self.scheduler.routes.remote(), timeout=30)
        if version == self.version:
            return False
        with self._lock:
            self.version = version
            self._handles = dict(handles)
            for session, weights in routes.items():
                self._routes.setdefault(session, DeficitRoundRobin()).update(weights)
            for session in set(self._routes) - set(routes):
                del self._routes[session]
        return True

    def devices(self, session: str) -> tuple[str, ...]:
        with self._lock:
            drr = self._routes.get(session)
            return drr.devices if drr else ()

    def submit(self, session: str, items: list[tuple]) -> list[Future]:
        """(request id, ms it has left, and what the backend takes beside: an engine
        backend's frame) each; a future of each one's (outcome, ...)."""
        futures = [Future() for _ in items]
        groups: dict[str, list[int]] = {}
        with self._lock:
            self._arrived[session] += len(items)
            drr = self._routes.get(session)
            for i in range(len(items)):
                try:
                    device = drr.next() if drr is not None else None
                except NoRoute:
                    device = None
                if device is None or device not in self._handles:
                    self._resolve(futures[i], "unrouted")
                    continue
                groups.setdefault(device, []).append(i)
            handles = {d: self._handles[d] for d in groups}
        for device, idx in groups.items():
            ref = handles[device].submit.remote(session, [items[i] for i in idx])
            with self._lock:
                self._pending[ref] = _Sent(device, [futures[i] for i in idx])
            self._sent.set()
        return futures

    def lost(self, device: str) -> None:
        """A device died: no more requests go there until the next table."""
        with self._lock:
            self._handles.pop(device, None)
            for drr in self._routes.values():
                drr.remove(device)

    def close(self) -> None:
        self._stop.set()
        self._sent.set()
        for t in self._threads:
            t.join(timeout=5)
        with self._lock:
            pending, self._pending = self._pending, {}
        for sent in pending.values():
            for fut in sent.futures:
                self._resolve(fut, "backend_lost")

    # -- the threads --------------------------------------------------------------------------------
    def _refresher(self) -> None:
        started = last_report = time.monotonic()
        history: deque[tuple[float, Counter]] = deque([(started, Counter())])  # (time, arrivals so far)
        while not self._stop.wait(self.refresh_s):
            try:
                self.refresh()
            except Exception as exc:  # the scheduler restarting: keep the tables we have
                log.info("router %s: routes not refreshed: %s", self.router_id, exc)
            now = time.monotonic()
            if now - last_report >= self.report_s:
                last_report = now
                with self._lock:
                    history.append((now, Counter(self._arrived)))
                while len(history) > 2 and now - history[1][0] >= self.rate_window_s:
                    history.popleft()
                (t0, before), (_, counts) = history[0], history[-1]
                rates = {s: (counts[s] - before[s]) / (now - t0) for s in counts}
                try:
                    self.scheduler.report_rates.remote(self.router_id, rates)
                except Exception as exc:
                    log.info("router %s: rates not reported: %s", self.router_id, exc)

    def _collector(self) -> None:
        import ray

        while not self._stop.is_set():
            with self._lock:
                refs = list(self._pending)
                if not refs:
                    self._sent.clear()
            if not refs:
                self._sent.wait(0.1)  # nothing in flight: wait for a call rather than poll
                continue
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0.005, fetch_local=True)
            for ref in ready:
                with self._lock:
                    sent = self._pending.pop(ref)
                try:
                    results = ray.get(ref)
                except ray.exceptions.RayTaskError as exc:  # the call failed; the device lives
                    log.error("router %s: device %s failed %d requests: %s", self.router_id, sent.device,
                              len(sent.futures), type(exc.cause).__name__ if exc.cause else exc)
                    for fut in sent.futures:
                        self._resolve(fut, "error")
                    continue
                except Exception as exc:  # the actor died with these in flight
                    log.warning("router %s: device %s lost with %d requests in flight (%s)", self.router_id,
                                sent.device, len(sent.futures), type(exc).__name__)
                    self.lost(sent.device)
                    for fut in sent.futures:
                        self._resolve(fut, "backend_lost")
                    continue
                for fut, (_, outcome, *beside) in zip(sent.futures, results):
                    self._resolve(fut, outcome, *beside)

    def _resolve(self, fut: Future, outcome: str, *beside) -> None:
        self.outcomes[outcome] += 1
        if not fut.done():
            fut.set_result((outcome, *beside))
