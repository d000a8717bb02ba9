"""Lanes: a device running several batches at once (engine/lanes.py), with the early
drop, the guest's turns and the profiles planned for them."""

import threading

import numpy as np
import pytest

from core.host import usable_cores
from engine.arbiter import DeviceArbiter
from engine.deadlines import hopeless
from engine.engine import Engine
from engine.lanes import AUTO_MAX_LANES, lane_threads, resolve_lanes
from engine.metrics import EngineMetrics
from engine.profiles import Profile
from engine.requests import Request
from models.repository import ModelRepository
from repo import tiny_state, write_model

FRAME = np.zeros((32, 32, 3), np.uint8)


def test_lanes_default_to_one_on_a_gpu_and_one_per_core_on_a_cpu():
    assert resolve_lanes("cuda:0", None) == 1
    assert resolve_lanes("cpu", None) == min(usable_cores(), AUTO_MAX_LANES)
    assert resolve_lanes("cpu", 3) == 3
    assert lane_threads("cpu", 1) == usable_cores()
    assert lane_threads("cpu", usable_cores() * 2) == 1
    assert lane_threads("cuda", 1) is None
    for bad in (0, -1, 65):
        with pytest.raises(ValueError, match="lanes must be in 1..64"):
            resolve_lanes("cpu", bad)


def test_the_early_drop_counts_batches_that_run_side_by_side():
    profile = Profile.linear(10.0, 0.0, 4)  # a full batch of 4 takes 40 ms
    # 11 ahead and this one: three full batches. One lane clears them in 120 ms, two
    # in 80 ms (two side by side, then the third), three in 40 ms.
    assert hopeless(11, profile, 0.0, 100.0, lanes=1)
    assert not hopeless(11, profile, 0.0, 100.0, lanes=2)
    assert hopeless(11, profile, 0.0, 79.0, lanes=2)
    assert not hopeless(11, profile, 0.0, 40.0, lanes=3)
    # 8 ahead and this one: two full batches and one of 1, which runs after them on
    # two lanes (40 + 10 ms) and beside them on three (40 ms)
    assert hopeless(8, profile, 0.0, 49.0, lanes=2) and not hopeless(8, profile, 0.0, 50.0, lanes=2)
    assert not hopeless(8, profile, 0.0, 40.0, lanes=3)
    # one lane: as the queue has always been counted
    assert hopeless(8, profile, 0.0, 89.0) and not hopeless(8, profile, 0.0, 90.0)



def test_the_early_drop_counts_in_the_batches_the_scheduler_forms():
    # items cost 6 ms in batches of 4 and 9 ms in 8: the queue runs in fours, so 7 ahead
    # and this one clear in two batches of 24 ms, not one of 72
    profile = Profile("h", "cpu", (1, 2, 4, 8), (10.0, 16.0, 24.0, 72.0), (0.0,) * 4)
    assert profile.efficient_batch == 4
    assert not hopeless(7, profile, 0.0, 48.0) and hopeless(7, profile, 0.0, 47.0)


@pytest.mark.parametrize("lanes", [1, 2])
def test_two_lanes_run_two_batches_at_once_and_one_lane_never_does(tmp_path, lanes):
    for name, seed in (("p", 1), ("q", 2)):  # two models: two sessions, two batches
        write_model(tmp_path, name, 1, {"split": []}, state=tiny_state(backbone_seed=seed))
    with Engine(ModelRepository(tmp_path), "cpu", lanes=lanes) as engine:
        engine.load("p")
        engine.load("q")
        running, most = [0], [0]
        lock = threading.Lock()
        both = threading.Barrier(2, timeout=10)  # passes only when two batches run together

        def watched(batch, run):
            with lock:
                running[0] += 1
                most[0] = max(most[0], running[0])
            try:
                if lanes == 2:
                    both.wait()
                else:
                    threading.Event().wait(0.2)  # room for a second batch, were there a lane for it
                return run(batch)
            finally:
                with lock:
                    running[0] -= 1

        for info in engine.manager.sessions.values():
            info.fragment.run = lambda batch, run=info.fragment.run: watched(batch, run)
        futures = engine.submit_many([Request(m, m, FRAME, engine.clock(), 30_000.0) for m in ("p", "q")])
        results = [f.result(timeout=30) for f in futures]
    assert [r.model for r in results] == ["p", "q"]
    assert most[0] == lanes
    assert engine.load_report()["lanes"] == lanes


def test_a_guest_step_has_the_device_to_itself():
    """Batches on two lanes run together; a granted step waits for both to end, and no
    batch starts while it runs. The step is booked on every lane."""
    cond = threading.Condition()
    arbiter = DeviceArbiter(cond, EngineMetrics(), lanes=2)
    order: list[str] = []
    inside = threading.Barrier(3, timeout=10)
    release = threading.Event()

    def vision(name: str) -> None:
        with arbiter.batch():
            order.append(f"{name} in")
            inside.wait()  # both batches are in at once
            release.wait(10)
            order.append(f"{name} out")

    def guest() -> None:
        with arbiter.turn(5.0):
            order.append("step")
            step_running.set()
            threading.Event().wait(0.2)
            order.append("step end")

    with cond:
        arbiter.share.join(0.1)
        arbiter.share.grant(by_share=False)
    lanes = [threading.Thread(target=vision, args=(n,)) for n in ("a", "b")]
    for t in lanes:
        t.start()
    inside.wait()
    step_running = threading.Event()
    g = threading.Thread(target=guest)
    g.start()
    assert not step_running.wait(0.3)  # the step waits for the batches
    release.set()
    assert step_running.wait(10)
    late = threading.Thread(target=vision, args=("c",))
    inside = threading.Barrier(1)  # the late batch has no partner to wait for
    late.start()
    for t in (*lanes, g, late):
        t.join(10)
    assert order.index("step") > max(order.index("a out"), order.index("b out"))
    assert order.index("c in") > order.index("step end")
    assert arbiter.share.guest_ms >= 2 * 200.0  # 0.2 s on each of two lanes
