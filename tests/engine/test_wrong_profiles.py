"""A stored profile that is wrong, either way, on a fake device in simulated time.

The device's true latency is the stored profile's times a factor (with 5% jitter).
Poisson requests arrive at what the true device can serve within their SLO. They go
through the engine's own decisions: the early drop at admission
(engine/deadlines.py), the Nexus plan with its probe batches (engine/scheduler.py)
and the profile corrected by what batches take (engine/observed.py). The bound is the
goodput of the same arrivals planned with the true profile; over the last two
seconds of ten, goodput must reach 0.9 of it. Before probe batches, a profile 4x too
slow dropped every request for ever.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest

from engine.deadlines import HANDOFF_MS, ahead_of, hopeless
from engine.observed import ObservedProfiles
from engine.profiles import Profile
from engine.scheduler import NexusPolicy, WorkItem

SIZES = (1, 2, 4, 8, 16)
SESSION = "s"
ARRIVE, DONE, WAKE = 0, 1, 2  # simulation events


def linear(fixed_ms: float, per_item_ms: float) -> Profile:
    return Profile(SESSION, "cpu", SIZES, tuple(fixed_ms + per_item_ms * b for b in SIZES),
                   tuple(0.02 * (fixed_ms + per_item_ms * b) for b in SIZES))


def served_rate(profile: Profile, slo_ms: float) -> float:
    """Requests/s the device serves when every batch waits for one and then runs: the
    largest batch with 2 l(b) within the SLO, back to back."""
    b = max(1, profile.largest_batch_within(slo_ms / 2, sigmas=0))
    return b * 1000.0 / profile.latency_ms(b)


@dataclass
class FakeDevice:
    """One lane; `truth(t)` is the factor the stored profile is off by at time t."""
    stored: Profile
    slo_ms: float
    truth: Callable[[float], float]
    rate_rps: float
    seed: int = 0
    log: dict = field(default_factory=dict)  # request id -> (capture ms, latency ms or None if dropped)

    def run(self, seconds: float) -> None:
        rng = np.random.default_rng(self.seed)
        policy = NexusPolicy()
        observed = ObservedProfiles()
        queue: list[WorkItem] = []
        arrivals = np.cumsum(rng.exponential(1000.0 / self.rate_rps, int(self.rate_rps * seconds * 2)))
        arrivals = arrivals[arrivals < seconds * 1000.0]
        events = [(float(t), ARRIVE, i) for i, t in enumerate(arrivals)]  # (time, kind, request id)
        heapq.heapify(events)
        started, running = 0.0, ()  # the batch on the device: when it started, its item ids
        while events:
            now, kind, rid = heapq.heappop(events)
            if kind == ARRIVE:
                deadline = now + self.slo_ms - HANDOFF_MS
                ahead = ahead_of([(w.priority, w.flow) for w in queue], "app", 0, policy.served)
                if hopeless(ahead, observed.current(SESSION, self.stored), now, deadline):
                    self.log[rid] = (now, None)
                    policy.shed("app")
                else:
                    queue.append(WorkItem(rid, now, deadline, self.slo_ms, slo_ms=self.slo_ms, flow="app"))
            elif kind == DONE:
                observed.batch_ran(SESSION, self.stored, len(running), now - started)
                for item_id in running:
                    self.log[item_id] = (arrivals[item_id], now - arrivals[item_id])
                running = ()
            if running or not queue:
                continue
            plan = policy.plan({SESSION: queue}, {SESSION: observed.current(SESSION, self.stored)}, now)
            for item_id, _ in plan.dropped:
                self.log[item_id] = (arrivals[item_id], None)
            if plan.session is not None:
                started, running = now, plan.batch
                took = self.stored.latency_ms(len(running)) * self.truth(now) * float(rng.lognormal(0.0, 0.05))
                heapq.heappush(events, (now + took, DONE, -1))
            elif plan.wait_until_ms is not None:
                heapq.heappush(events, (plan.wait_until_ms, WAKE, -1))
            taken = set(plan.batch) | {i for i, _ in plan.dropped}
            queue = [w for w in queue if w.item_id not in taken]

    def goodput_share(self, start_s: float, end_s: float) -> float:
        """Requests captured in [start, end) that finished within their SLO, over those
        offered then."""
        window = [lat for t, lat in self.log.values() if start_s * 1000 <= t < end_s * 1000]
        good = sum(1 for lat in window if lat is not None and lat <= self.slo_ms)
        return good / len(window) if window else math.nan


# (stored profile, its error, SLO): 4x too slow, where the stored profile says even one
# request alone misses its SLO; and 4x too fast, where it says batches of 16 fit easily
CASES = {"device 4x faster than its profile": (linear(160.0, 80.0), 0.25, 200.0),
         "device 4x slower than its profile": (linear(10.0, 5.0), 4.0, 300.0)}


def goodput(stored: Profile, error: float, slo_ms: float, rate_rps: float) -> float:
    """Requests/s within their SLO over the last two of ten simulated seconds."""
    device = FakeDevice(stored, slo_ms, lambda t: error, rate_rps)
    device.run(10.0)
    return device.goodput_share(8.0, 10.0) * rate_rps


@pytest.mark.parametrize("case", CASES)
def test_a_wrong_profile_is_corrected_within_ten_seconds(case):
    stored, error, slo = CASES[case]
    true = stored.scaled(error)
    rate = served_rate(true, slo)
    bound = goodput(true, 1.0, slo, rate)
    assert bound >= 0.8 * rate  # the instrument: a right profile serves most of the load
    assert goodput(stored, error, slo, rate) >= 0.9 * bound
