"""A stream's worker in-process, on a real file stream and the real engine: one app's
failure stays that app's, and an app whose model is gone says so."""

from __future__ import annotations

import pytest

from apps.app import App
from apps.spec import parse_spec
from engine.engine import Engine
from models.repository import ModelRepository
from runtime.worker import StreamWorker
from streams.live import ManagedStream
from streams.options import StreamOptions
from support.processes import ROOT, wait_for

pytestmark = pytest.mark.slow  # a looping stream through the real engine, for seconds a test


@pytest.fixture
def worker(short_clip):
    engine = Engine(ModelRepository(ROOT / "configs" / "models"), "cpu")
    stream = ManagedStream("s", str(short_clip[0]), StreamOptions(realtime=True, loop=True))
    events = []
    w = StreamWorker(stream, engine, events.extend, 4, 300.0, engine.clock).start()
    yield w, engine
    w.stop()
    engine.close()


def status(w: StreamWorker, name: str) -> tuple[str, str | None]:
    s = w.app_status[name]
    return s.status, s.error


def test_an_app_that_raises_fails_alone(worker, monkeypatch):
    w, _ = worker
    real = App.observe
    calls = {"n": 0}

    def observe(self, block, detections, classes=None):
        if self.name == "broken":
            calls["n"] += 1
            if calls["n"] == 3:
                raise OverflowError("cannot convert float infinity to integer")
        return real(self, block, detections, classes)

    monkeypatch.setattr(App, "observe", observe)
    for name in ("broken", "fine"):
        w.set_app(parse_spec({"name": name, "detector": "motion", "fps": 5}))
    wait_for(lambda: status(w, "broken")[0] == "failed", 30, "the broken app marked failed")
    assert "OverflowError: cannot convert float infinity" in status(w, "broken")[1]
    frames = w.apps._runners["fine"].app.num_frames
    wait_for(lambda: w.apps._runners["fine"].app.num_frames > frames + 5, 30, "the other app goes on")
    assert status(w, "fine") == ("running", None)
    assert w.running and "broken" not in w.apps._runners
    w.set_app(parse_spec({"name": "broken", "detector": "motion", "fps": 5}))  # adding it again restarts it
    wait_for(lambda: status(w, "broken")[0] == "running", 30, "restarted")


def test_an_app_whose_model_is_unloaded_is_degraded_until_it_is_back(worker):
    w, engine = worker
    w.set_app(parse_spec({"name": "people", "detector": "scenedet", "classes": ["person"], "model_version": 1}))
    wait_for(lambda: status(w, "people")[0] == "running", 120, "running")
    engine.unload("scenedet")
    wait_for(lambda: status(w, "people")[0] == "degraded", 30, "degraded")
    assert "unavailable" in status(w, "people")[1] and "not loaded" in status(w, "people")[1]
    engine.load("scenedet")
    wait_for(lambda: status(w, "people")[0] == "running", 30, "running again")


@pytest.mark.parametrize("realtime", [False, True])
def test_a_file_not_paced_is_analysed_whole_however_late(short_clip, realtime):
    """Every frame reaches the worker 10 s after its capture, far past a 1 s SLO: a paced
    file is a camera and its late frames are dropped; a file read as fast as it is
    consumed has no real time, and every sampled frame is analysed."""
    engine = Engine(ModelRepository(ROOT / "configs" / "models"), "cpu")
    stream = ManagedStream("s", str(short_clip[0]), StreamOptions(realtime=realtime),
                           clock=lambda: engine.clock() - 10_000.0)
    w = StreamWorker(stream, engine, lambda events, frames: [], 4, 300.0, engine.clock)
    w.set_app(parse_spec({"name": "people", "detector": "scenedet", "classes": ["person"], "fps": 5,
                          "slo_ms": 1000}))
    w.start()
    try:
        wait_for(lambda: stream.stats.status == "ended" and not w.running, 120, "the clip to end")
    finally:
        w.stop()
        engine.close()
    summary = engine.metrics.app_summary("people")
    assert summary["arrived"] == 10  # 2 s at 5 fps
    if realtime:
        assert summary["completed"] == 0 and summary["dropped"] == {"deadline": 10}
    else:
        assert summary["completed"] == 10 and not summary["dropped"]
