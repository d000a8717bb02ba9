"""A backend's device loop on its own (no Ray): a fake clock that the executor moves on
by l(b), as a device that behaves as its profile says."""

from __future__ import annotations

import asyncio

from cluster.device import DeviceRunner
from cluster.placement import Workload
from engine.profiles import Profile


def linear(alpha: float, beta: float, max_batch: int = 16) -> Profile:
    return Profile.linear(alpha, beta, max_batch, "p", "test")


class Device:
    """A DeviceRunner whose batches take the profile's time on a fake clock."""

    def __init__(self) -> None:
        self.now = 0.0
        self.batches: list[tuple[str, int]] = []
        self.runner = DeviceRunner(self._execute, clock=lambda: self.now)

    async def _execute(self, session: str, n: int) -> None:
        self.batches.append((session, n))
        self.now += self.runner.workload(session).profile.latency_ms(n) / 1000.0
        await asyncio.sleep(0)


def run(coro):
    return asyncio.run(coro)


async def drain(d: Device) -> None:
    """Rounds until one runs nothing (every queue empty or dropped)."""
    while await d.runner.round():
        pass


def test_queued_requests_run_in_batches_up_to_the_largest_that_fits():
    async def go():
        d = Device()
        w = Workload("s", 100.0, 100.0, linear(2.0, 8.0))  # B: 2 * l(b) <= 100 -> b <= 21, capped at 16
        d.runner.apply(50.0, {"s": (w, 4)})
        futures = d.runner.submit("s", [(i, 100.0) for i in range(20)])
        await drain(d)
        return d, [f.result() for f in futures]

    d, outcomes = run(go())
    assert outcomes == ["ok"] * 20
    assert d.batches == [("s", 16), ("s", 4)]  # the planned 4 grows to B under a burst


def test_early_drop_takes_the_oldest_that_cannot_make_it():
    """Thirty requests with 100 ms left, batches of l(b) = 5b + 10 ms: a batch of 16 takes
    90 ms and fits; the next batch would end at 90 + l(n) > 100 ms unless n is 0, so the
    rest are dropped before they run, and the device never runs a batch that misses."""

    async def go():
        d = Device()
        w = Workload("s", 10.0, 200.0, linear(5.0, 10.0))
        d.runner.apply(100.0, {"s": (w, 16)})
        futures = d.runner.submit("s", [(i, 100.0) for i in range(30)])
        await drain(d)
        return d, [f.result() for f in futures]

    d, outcomes = run(go())
    assert outcomes[:16] == ["ok"] * 16 and outcomes[16:] == ["deadline"] * 14
    assert d.batches == [("s", 16)]


def test_a_session_not_in_the_table_is_refused_at_once():
    async def go():
        d = Device()
        d.runner.apply(50.0, {"s": (Workload("s", 1.0, 100.0, linear(1.0, 1.0)), 1)})
        return [f.result() for f in d.runner.submit("other", [(0, 100.0)])]

    assert run(go()) == ["not_here"]


def test_a_session_taken_off_the_table_still_runs_what_it_had_queued():
    async def go():
        d = Device()
        w = Workload("s", 1.0, 1000.0, linear(1.0, 1.0))
        d.runner.apply(50.0, {"s": (w, 2)})
        queued = d.runner.submit("s", [(i, 1000.0) for i in range(3)])
        d.runner.apply(50.0, {})  # the scheduler moved it elsewhere
        later = d.runner.submit("s", [(9, 1000.0)])
        await drain(d)
        return [f.result() for f in queued + later], d.runner.queues

    outcomes, queues = run(go())
    assert outcomes == ["ok", "ok", "ok", "not_here"] and queues == {}


def test_the_loop_waits_for_work_and_wakes_on_a_submit():
    async def go():
        d = Device()
        d.runner.apply(50.0, {"s": (Workload("s", 1.0, 1000.0, linear(1.0, 1.0)), 1)})
        loop = asyncio.create_task(d.runner.run())
        await asyncio.sleep(0.01)
        assert d.batches == []
        result = await asyncio.wait_for(d.runner.submit("s", [(0, 1000.0)])[0], timeout=5)
        loop.cancel()
        return result

    assert run(go()) == "ok"
