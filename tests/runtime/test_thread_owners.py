"""State with one owning thread: an app's objects belong to its stream's block loop
thread (`blocks-<stream>`), and a stream's frame filter to its decoder thread. Readers
and writers on other threads (the API's, as `GET /v1/apps/{name}`, and the block loop
setting the stream's demand) go through what the owner publishes, never the objects
themselves. Each test records the threads that touch the owned objects while other
threads hammer them, with the interpreter switching threads as often as it can."""

from __future__ import annotations

import sys
import threading
import time

import pytest

import streams.live
from apps.app import App
from apps.spec import parse_spec
from engine.engine import Engine
from models.repository import ModelRepository
from runtime.worker import StreamWorker
from streams.blocks import FrameSampler
from streams.live import ManagedStream
from streams.options import StreamOptions
from support.processes import ROOT, wait_for

pytestmark = pytest.mark.slow  # a looping stream, and the engine, for seconds a test


class Touches:
    """The names of the threads that called the wrapped methods."""

    def __init__(self) -> None:
        self.threads: set[str] = set()

    def wrap(self, method):
        def touched(obj, *args, **kwargs):
            self.threads.add(threading.current_thread().name)
            return method(obj, *args, **kwargs)
        return touched


@pytest.fixture
def switching():
    """Threads switch every microsecond: a read that races a write meets it."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def test_an_apps_counts_are_read_from_what_its_worker_published(short_clip, monkeypatch, switching):
    touches = Touches()
    for method in ("counts", "observe", "reconfigure"):
        monkeypatch.setattr(App, method, touches.wrap(getattr(App, method)))
    engine = Engine(ModelRepository(ROOT / "configs" / "models"), "cpu")
    stream = ManagedStream("s", str(short_clip[0]), StreamOptions(realtime=True, loop=True))
    w = StreamWorker(stream, engine, lambda events, frames: [], 4, 300.0, engine.clock).start()
    whole = [[0, 0], [1, 0], [1, 1], [0, 1]]
    try:
        w.set_app(parse_spec({"name": "moving", "detector": "motion", "zones": {"all": whole}}))
        wait_for(lambda: w.app_counts("moving") is not None, 30, "the app's first counts")
        reads, entered, t_end = 0, [], time.monotonic() + 4.0
        while time.monotonic() < t_end:  # as GET /v1/apps/{name}, on this thread
            counts = w.app_counts("moving")
            entered.append(counts["zones"]["all"]["entered"])
            reads += 1
            if reads % 500 == 0:  # its zones change while it is read
                w.set_app(parse_spec({"name": "moving", "detector": "motion", "zone_inertia": 1 + reads % 1000 // 500,
                                      "zones": {"all": whole}}))
        assert entered[-1] > entered[0], "the zone's counts moved while they were read"
        w.remove_app("moving")
        assert w.app_counts("moving") is None
    finally:
        w.stop()
        engine.close()
    assert touches.threads == {"blocks-s"}, touches.threads


def test_a_streams_frame_filter_is_its_decoder_threads_alone(short_clip, monkeypatch, switching):
    touches = Touches()
    owned = type("OwnedSampler", (FrameSampler,), {m: touches.wrap(getattr(FrameSampler, m))
                                                    for m in ("set_fps", "wants", "due")})
    monkeypatch.setattr(streams.live, "FrameSampler", owned)
    clip, truth = short_clip
    stream = ManagedStream("s", str(clip), StreamOptions(realtime=False, loop=True)).start()
    try:
        delivered = 0
        for i, frame in enumerate(stream.frames()):
            # as the block loop does after every block, on its own thread (this one)
            stream.set_demand((truth["fps"] / 3, truth["fps"] / 2, None)[i % 3])
            delivered += frame is not None
            if delivered >= 3 * len(truth["frames"]):
                break
    finally:
        stream.stop()
    status = stream.status()
    assert status["frames_skipped"] + status["frames_not_decoded"] > 0, "the demand was applied"
    assert touches.threads == {"stream-s"}, touches.threads
