"""A stream whose apps are below the top priority in use runs its decoder and worker
threads in the background (a higher nice value), and comes back when one of its apps
is raised to the top (runtime/cpu_priority.py)."""

from __future__ import annotations

import logging
import os
import threading

import pytest

from apps.spec import parse_spec
from engine.engine import Engine
from models.repository import ModelRepository
from runtime.cpu_priority import BACKGROUND_NICE, BATCH_POLICY, ThreadLevel, nice_of, policy_of
from runtime.load import LoadGovernor
from runtime.worker import StreamWorker
from streams.live import ManagedStream
from streams.options import StreamOptions
from support.processes import ROOT, wait_for

BASE = os.getpriority(os.PRIO_PROCESS, 0)


@pytest.fixture
def idle_thread():
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, daemon=True)
    t.start()
    yield t.native_id
    stop.set()
    t.join()


def test_a_level_moves_threads_back_and_forth(idle_thread):
    if BASE + BACKGROUND_NICE > 19:
        pytest.skip("this process runs too nice already")
    level = ThreadLevel("s")
    level.background(True, [idle_thread, None])  # a thread not started yet has no id: skipped
    assert nice_of(idle_thread) == BASE + BACKGROUND_NICE and level.is_background
    assert nice_of(threading.get_native_id()) == BASE  # only the threads named
    if BATCH_POLICY is not None:  # no wakeup preemption of the lanes (Linux)
        assert policy_of(idle_thread) == BATCH_POLICY
        assert policy_of(threading.get_native_id()) == os.SCHED_OTHER
    if os.geteuid() != 0:
        pytest.skip("lowering a nice value back needs CAP_SYS_NICE")
    level.background(False, [idle_thread])
    assert nice_of(idle_thread) == BASE and not level.is_background
    if BATCH_POLICY is not None:
        assert policy_of(idle_thread) == os.SCHED_OTHER


def test_without_the_privilege_to_come_back_it_stays_and_says_so(idle_thread, monkeypatch, caplog):
    level = ThreadLevel("s")
    level.background(True, [idle_thread])
    real = os.setpriority

    def unprivileged(which, who, nice):
        if nice < os.getpriority(which, who):
            raise PermissionError(13, "Permission denied")
        real(which, who, nice)

    monkeypatch.setattr(os, "setpriority", unprivileged)
    with caplog.at_level(logging.WARNING, "vigil.cpu"):
        level.background(False, [idle_thread])
        level.background(False, [idle_thread])
    assert level.is_background and nice_of(idle_thread) == BASE + BACKGROUND_NICE
    warnings = [r.getMessage() for r in caplog.records if "CAP_SYS_NICE" in r.getMessage()]
    assert len(warnings) == 1, warnings


@pytest.mark.slow
def test_the_lower_priority_streams_threads_go_to_the_background(short_clip):
    if BASE + BACKGROUND_NICE > 19:
        pytest.skip("this process runs too nice already")
    engine = Engine(ModelRepository(ROOT / "configs" / "models"), "cpu")
    governor = LoadGovernor()
    workers = {}
    for name, priority in (("high", 10), ("low", 0)):
        stream = ManagedStream(name, str(short_clip[0]), StreamOptions(realtime=True, loop=True))
        w = StreamWorker(stream, engine, lambda events, frames: [], 4, 300.0, engine.clock, governor=governor)
        w.set_app(parse_spec({"name": f"{name}-motion", "source": name, "detector": "motion",
                              "priority": priority}))
        workers[name] = w.start()

    def nices(w: StreamWorker) -> list[int | None]:
        return [nice_of(w.native_id), nice_of(w.stream.native_id)]

    def policies(w: StreamWorker) -> list[int | None]:
        return [policy_of(w.native_id), policy_of(w.stream.native_id)]

    try:
        wait_for(lambda: nices(workers["low"]) == [BASE + BACKGROUND_NICE] * 2, 30, "the low stream in the background")
        assert nices(workers["high"]) == [BASE, BASE]
        if BATCH_POLICY is not None:
            assert policies(workers["low"]) == [BATCH_POLICY] * 2
            assert policies(workers["high"]) == [os.SCHED_OTHER] * 2
        if os.geteuid() == 0:  # raised to the top priority, it comes back
            workers["low"].set_app(parse_spec({"name": "low-motion", "source": "low", "detector": "motion",
                                               "priority": 10}))
            wait_for(lambda: nices(workers["low"]) == [BASE, BASE], 30, "the low stream back in the foreground")
            if BATCH_POLICY is not None:
                assert policies(workers["low"]) == [os.SCHED_OTHER] * 2
    finally:
        for w in workers.values():
            w.stop()
        engine.close()
