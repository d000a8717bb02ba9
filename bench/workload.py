"""Open-loop load for benchmarks: arrival processes, a trial runner, goodput search.

Arrivals are scheduled ahead (seeded) and submitted at their time by one thread; a
request's capture time is its scheduled arrival, so time lost anywhere (in the
generator, the queue or the device) counts against the SLO. A trial's attainment is
the share of requests completed within their SLO; dropped requests count as misses.
Goodput is found by bisection as the highest rate with attainment >= 0.99 (Nexus's
definition of throughput).
"""

from __future__ import annotations

import gc
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

TARGET = 0.99


def poisson_arrivals(rate: float, duration_s: float, rng: np.random.Generator) -> np.ndarray:
    """Arrival times in ms over [0, duration_s)."""
    if rate <= 0:
        return np.zeros(0)
    gaps = rng.exponential(1000.0 / rate, size=int(rate * duration_s * 1.5) + 16)
    times = np.cumsum(gaps)
    return times[times < duration_s * 1000.0]


def ramp_arrivals(rate0: float, rate1: float, duration_s: float, rng: np.random.Generator) -> np.ndarray:
    """Poisson with a rate rising linearly from rate0 to rate1 (thinning)."""
    peak = max(rate0, rate1)
    candidates = poisson_arrivals(peak, duration_s, rng)
    rate_at = rate0 + (rate1 - rate0) * candidates / (duration_s * 1000.0)
    return candidates[rng.random(len(candidates)) < rate_at / peak]


def bursty_arrivals(rate: float, duration_s: float, rng: np.random.Generator, period_s: float = 1.0,
                    high: float = 1.6) -> np.ndarray:
    """Poisson whose rate alternates between high*rate and (2-high)*rate every period:
    the same mean, with bursts a batching policy must absorb."""
    out, t = [], 0.0
    phase = 0
    while t < duration_s:
        r = rate * (high if phase % 2 == 0 else 2 - high)
        span = min(period_s, duration_s - t)
        out.append(t * 1000.0 + poisson_arrivals(r, span, rng))
        t += period_s
        phase += 1
    return np.concatenate(out) if out else np.zeros(0)


@dataclass(frozen=True)
class Stream:
    """A camera whose frames are analysed by several apps (one request per app per frame)."""

    name: str
    apps: tuple[tuple[str, str], ...]  # (app, model)
    rate: float  # frames per second
    slo_ms: float
    priority: int = 0
    bursty: bool = False
    rate_end: float | None = None  # a ramp from `rate` to this
    version: int | str | None = None  # model version, label or "adaptive"


class Target(Protocol):
    """What a trial drives: Vigil's engine, or a peer behind the same interface."""

    def clock(self) -> float: ...

    def send(self, stream: Stream, seq: int, capture_ms: float) -> list["Pending"]: ...


@dataclass
class Pending:
    app: str
    slo_ms: float
    wait: Callable[[], tuple[bool, str, int | None]]  # -> (within SLO, ok | late | <drop reason>, version)


@dataclass
class TrialResult:
    arrived: dict[str, int] = field(default_factory=dict)
    within: dict[str, int] = field(default_factory=dict)
    outcomes: dict[str, dict[str, int]] = field(default_factory=dict)
    versions: dict[str, dict[int, int]] = field(default_factory=dict)  # app -> version -> completed

    def attainment(self, app: str | None = None) -> float:
        apps = [app] if app else list(self.arrived)
        arrived = sum(self.arrived.get(a, 0) for a in apps)
        return sum(self.within.get(a, 0) for a in apps) / arrived if arrived else 1.0

    def admitted_attainment(self, app: str) -> float:
        dropped = sum(n for k, n in self.outcomes.get(app, {}).items() if k not in ("ok", "late"))
        admitted = self.arrived.get(app, 0) - dropped
        return self.within.get(app, 0) / admitted if admitted else 1.0

    def dropped(self, app: str) -> int:
        return sum(n for k, n in self.outcomes.get(app, {}).items() if k not in ("ok", "late"))


def run_trial(target: Target, streams: list[Stream], duration_s: float, seed: int = 0,
              warmup_s: float = 0.5, during: Callable[[float], None] | None = None) -> TrialResult:
    """Drive the streams for `duration_s`; requests in the first `warmup_s` are not counted.
    `during(elapsed_s)` is called from the generator between arrivals (for swaps)."""
    rng = np.random.default_rng(seed)
    # Start every trial from the same heap: collect, then freeze what survives, so a
    # full collection over earlier trials' garbage does not pause this one.
    gc.collect()
    gc.freeze()
    schedule = []
    for s in streams:
        if s.rate_end is not None:
            times = ramp_arrivals(s.rate, s.rate_end, duration_s, rng)
        else:
            times = (bursty_arrivals if s.bursty else poisson_arrivals)(s.rate, duration_s, rng)
        schedule += [(t, s) for t in times]
    schedule.sort(key=lambda x: x[0])
    pending: list[tuple[float, Pending]] = []
    start = target.clock() + 50.0
    seqs: dict[str, int] = {}
    for t_ms, stream in schedule:
        due = start + t_ms
        while True:
            now = target.clock()
            if now >= due:
                break
            if during is not None:
                during((now - start) / 1000.0)
            time.sleep(min(0.005, (due - now) / 1000.0))
        seq = seqs.get(stream.name, 0)
        seqs[stream.name] = seq + 1
        for p in target.send(stream, seq, due):
            pending.append((t_ms, p))
    gc.unfreeze()
    result = TrialResult()
    for t_ms, p in pending:
        within, outcome, version = p.wait()
        if t_ms < warmup_s * 1000.0:
            continue
        if version is not None:
            served = result.versions.setdefault(p.app, {})
            served[version] = served.get(version, 0) + 1
        result.arrived[p.app] = result.arrived.get(p.app, 0) + 1
        result.within[p.app] = result.within.get(p.app, 0) + int(within)
        counts = result.outcomes.setdefault(p.app, {})
        counts[outcome] = counts.get(outcome, 0) + 1
    return result


def search_goodput(attainment_at: Callable[[float], float], hi: float, steps: int, lo: float = 0.0,
                   retries: int = 1, max_halvings: int = 8) -> float:
    """Highest rate in (lo, hi] found with attainment >= TARGET; 0 if none. The rate is
    halved from the middle of the range until one passes (at most `max_halvings`
    times), so that a policy far below the top still gets a figure rather than 0, then
    bisected between the last pass and the last failure (`steps` trials in all when the
    first rate passes). A rate that fails is tried again (`retries` times, the same for
    every policy): on a shared machine one unlucky trial should not decide a search."""

    def passes(rate: float) -> bool:
        return any(attainment_at(rate) >= TARGET for _ in range(1 + retries))

    rate = (lo + hi) / 2
    for _ in range(max_halvings):
        if passes(rate):
            break
        hi, rate = rate, (lo + rate) / 2
    else:
        return 0.0
    best = lo = rate
    for _ in range(steps - 1):
        mid = (lo + hi) / 2
        if passes(mid):
            best, lo = mid, mid
        else:
            hi = mid
    return best


class EngineTarget:
    """Runs a stream's requests through Vigil's engine."""

    def __init__(self, engine, frames: dict[str, np.ndarray]) -> None:
        from engine.requests import Request

        self.engine = engine
        self.frames = frames
        self._request = Request
        self.lock = threading.Lock()

    def clock(self) -> float:
        return self.engine.clock()

    def send(self, stream: Stream, seq: int, capture_ms: float) -> list[Pending]:
        from engine.requests import Dropped

        frame = self.frames[stream.name]
        reqs = [self._request(app, model, frame, capture_ms, stream.slo_ms, version=stream.version,
                              priority=stream.priority, input_key=(stream.name, seq)) for app, model in stream.apps]
        futures = self.engine.submit_many(reqs)

        def waiter(fut, slo):
            def wait() -> tuple[bool, str, int | None]:
                try:
                    r = fut.result(timeout=120)
                except Dropped as exc:
                    return False, exc.reason, None
                return r.within_slo, "ok" if r.within_slo else "late", r.version
            return wait

        return [Pending(app, stream.slo_ms, waiter(f, stream.slo_ms)) for (app, _), f in zip(stream.apps, futures)]
