"""The front door's engine (cluster/front.py) without a cluster: what it sends the
router and what it makes of the answers (a fake router; the local engine is real)."""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np
import pytest

from cluster.engine_backend import Asked
from cluster.front import ClusterEngine
from core.detections import Detections
from engine.requests import Dropped, Request, Result
from models.repository import ModelRepository
from vigil.settings import MODELS_DIR


class FakeRouter:
    version = None
    outcomes: dict = {}

    def __init__(self) -> None:
        self.sent: list[tuple[str, list[tuple]]] = []
        self.futures: list[Future] = []

    def submit(self, session: str, items: list[tuple]) -> list[Future]:
        self.sent.append((session, items))
        futures = [Future() for _ in items]
        self.futures += futures
        return futures

    def close(self) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000.0

    def __call__(self) -> float:
        return self.ms


@pytest.fixture(scope="module")
def front():
    clock, router = Clock(), FakeRouter()
    engine = ClusterEngine(ModelRepository(MODELS_DIR), None, router, {}, "test", clock)
    engine.local.load("scenedet", [2])  # here only: no scheduler to tell
    yield engine, router, clock
    engine.close()


def request(clock: Clock, app: str = "a", key=None, priority: int = 0) -> Request:
    return Request(app, "scenedet", np.zeros((36, 64, 3), np.uint8), clock(), 1000.0, None, priority, ("person",),
                   key)


def answer(router: FakeRouter, clock: Clock, backend_latency_ms: float, after_ms: float) -> None:
    clock.ms += after_ms
    fut = router.futures[-1]
    fut.set_result(("ok", Result("a", "scenedet", 2, {"head": Detections.empty()}, backend_latency_ms, True)))


def test_a_block_goes_as_one_group_with_what_each_request_asks(front):
    engine, router, clock = front
    futures = engine.submit_many([request(clock, "a", ("cam", 1), 5), request(clock, "b", ("cam", 1))])
    session, items = router.sent[-1]
    assert session == "scenedet:2" and len(items) == 2
    assert items[0][3] == Asked("a", 1000.0, 5, ("person",), ("cam", 1), True)
    assert items[1][3].input_key == items[0][3].input_key  # one input on the backend: one backbone run
    router.futures[-2].set_result(("deadline",))
    with pytest.raises(Dropped, match="deadline"):
        futures[0].result(timeout=5)
    answer(router, clock, 100.0, after_ms=100.0)
    assert futures[1].result(timeout=5).latency_ms == pytest.approx(100.0)


def test_the_time_left_allows_for_the_round_trip_learnt_from_answers(front):
    engine, router, clock = front
    engine._trip_ms.clear()
    engine.submit_many([request(clock)])
    assert router.sent[-1][1][0][1] == pytest.approx(1000.0)  # nothing learnt yet: all its time
    # 300 ms here, of which the backend counted 180 (its 120 lacks the trips there and back)
    answer(router, clock, 180.0, after_ms=300.0)
    engine.submit_many([request(clock)])
    assert router.sent[-1][1][0][1] == pytest.approx(1000.0 - 120.0)
    # sent with 120 less, the same trip reads the same: the allowance is not counted twice
    answer(router, clock, 180.0 + 120.0, after_ms=300.0)
    engine.submit_many([request(clock)])
    assert router.sent[-1][1][0][1] == pytest.approx(1000.0 - 120.0)


def test_an_unknown_version_is_unavailable_here_and_sends_nothing(front):
    engine, router, clock = front
    sent = len(router.sent)
    bad = Request("a", "scenedet", np.zeros((36, 64, 3), np.uint8), clock(), 1000.0, 7)
    with pytest.raises(Dropped, match="unavailable"):
        engine.submit_many([bad])[0].result(timeout=5)
    assert len(router.sent) == sent
