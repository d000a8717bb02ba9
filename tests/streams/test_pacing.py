"""The one pacer, on a fake clock, and the one buffer's two policies."""

from __future__ import annotations

import threading

import pytest

from streams.buffer import FrameBuffer
from streams.pacing import Pacer


class FakeClock:
    """Milliseconds that move only when something sleeps or the test says so."""

    def __init__(self, now_ms: float = 1000.0) -> None:
        self.now_ms = now_ms
        self.slept_s: list[float] = []

    def __call__(self) -> float:
        return self.now_ms

    def sleep(self, seconds: float) -> None:
        self.slept_s.append(seconds)
        self.now_ms += seconds * 1000.0


def test_frames_are_held_until_their_times_after_the_first():
    clock = FakeClock()
    pacer = Pacer(clock, clock.sleep)
    assert [pacer.wait(pts) for pts in (500.0, 600.0, 700.0)] == [1000.0, 1100.0, 1200.0]
    assert clock.slept_s == pytest.approx([0.1, 0.1])


@pytest.mark.parametrize("max_late_ms, late_ms, due", [
    (None, 3000.0, [1100.0, 1200.0]),  # the origin stays: the late frames come at once, aged
    (1000.0, 500.0, [1100.0, 1200.0]),  # within the allowance: the origin stays too
    (1000.0, 3000.0, [4000.0, 4100.0]),  # beyond it: on from now, spaced as before, no burst
])
def test_a_late_frame_moves_the_origin_only_past_the_allowance(max_late_ms, late_ms, due):
    clock = FakeClock()
    pacer = Pacer(clock, clock.sleep, max_late_ms)
    pacer.wait(0.0)
    clock.now_ms += late_ms  # held up: the buffer was full
    assert [pacer.wait(100.0), pacer.wait(200.0)] == due


def test_a_stop_cuts_the_wait_short():
    stop = threading.Event()
    stop.set()
    clock = FakeClock()
    pacer = Pacer(clock, stop.wait)
    pacer.wait(0.0)
    assert pacer.wait(60_000.0) == 61_000.0  # due a minute on, returned at once


def test_a_file_buffer_waits_for_room_until_stopped_and_a_live_one_drops_its_oldest():
    stop = threading.Event()
    buffer = FrameBuffer(2, stop, poll_s=0.01)
    assert buffer.put_waiting(1) and buffer.put_waiting(2)
    stop.set()
    assert not buffer.put_waiting(3)  # full and stopped: not put, not hung
    assert buffer.put_dropping(4) == 1 and buffer.put_dropping(5) == 1
    assert [buffer.get(0), buffer.get(0)] == [4, 5]
