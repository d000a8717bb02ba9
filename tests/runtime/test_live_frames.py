"""An app's latest frame: kept without encoding, drawn and encoded once when asked."""

import cv2
import numpy as np
import pytest

from apps.annotate import Overlay, draw_overlay
from runtime import live_frames
from runtime.live_frames import LiveFrames

DRAWN = Overlay(zones=(), lines=(((10, 5), (10, 90), "t/gate in 1 out 0"),),
                boxes=((60, 20, 120, 80, "#3 person"),), frame_class=None)


def frame() -> np.ndarray:
    """A smooth dark gradient: JPEG keeps it within a few levels."""
    ramp = np.linspace(0, 60, 200, dtype=np.float32)[None, :, None]
    return np.broadcast_to(ramp, (100, 200, 3)).astype(np.uint8)


def test_nothing_is_encoded_until_asked_and_then_once(monkeypatch):
    calls = []
    real = live_frames.rgb_jpeg

    def counting(*args, **kwargs):
        calls.append(args[0].shape)
        return real(*args, **kwargs)

    monkeypatch.setattr(live_frames, "rgb_jpeg", counting)
    live = LiveFrames()
    assert live.jpeg("a") is None
    for _ in range(5):  # a frame a second, nobody looking
        live.keep("a", frame(), DRAWN, 0)
    assert calls == []
    first = live.jpeg("a")
    assert live.jpeg("a") is first and len(calls) == 1
    live.keep("a", frame(), DRAWN, 0)
    assert live.jpeg("a") is not first and len(calls) == 2


def test_the_jpeg_is_the_kept_frame_with_its_overlay_and_the_source_may_change():
    live = LiveFrames()
    pixels = frame()
    live.keep("a", pixels, DRAWN, 1)
    expected = pixels.copy()
    draw_overlay(expected, DRAWN, 1)
    pixels[:] = 255  # the block's buffer, reused: the kept frame is a copy
    got = cv2.cvtColor(cv2.imdecode(np.frombuffer(live.jpeg("a"), np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    assert got.shape == expected.shape
    assert np.abs(got.astype(int) - expected.astype(int)).mean() < 3  # JPEG's loss only
    assert np.abs(got.astype(int) - frame().astype(int)).max() > 100  # the box and line are drawn


def test_a_forgotten_app_has_no_frame():
    live = LiveFrames()
    live.keep("a", frame(), DRAWN, 0)
    live.forget("a")
    assert live.jpeg("a") is None


@pytest.mark.parametrize("index", [0, 7])
def test_drawn_overlays_use_the_apps_colour(index):
    img = np.zeros((100, 200, 3), np.uint8)
    draw_overlay(img, DRAWN, index)
    from apps.annotate import PALETTE

    colour = PALETTE[index % len(PALETTE)]
    assert (img.reshape(-1, 3) == colour).all(axis=1).any()
