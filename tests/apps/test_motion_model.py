"""The motion detector's background model computes, bit for bit, the rule its docstring
states, written here plainly: gain-compensated difference, shadows left out, and a
slower update where the scene looks like foreground."""

from __future__ import annotations

import numpy as np

from apps.detectors.motion import BackgroundModel, MotionOptions


def plainly(state: dict, image: np.ndarray, o: MotionOptions) -> np.ndarray:
    frame = image.astype(np.float32)
    if state.get("bg") is None:
        state["bg"], state["n"] = frame.copy(), 0
    bg = state["bg"]
    grid = (slice(None, None, 7), slice(None, None, 7))
    frame /= np.median(frame[grid] + 1.0, axis=(0, 1)) / np.median(bg[grid] + 1.0, axis=(0, 1))
    diff = np.abs(frame - bg).max(axis=2)
    ratio = (frame + 1.0) / (bg + 1.0)
    shadow = (ratio.max(axis=2) < 0.92) & (ratio.min(axis=2) > 0.45) & (ratio.max(axis=2) - ratio.min(axis=2) < 0.12)
    fg = (diff > o.threshold) & ~shadow
    rate = np.where(fg, o.learn_foreground, o.learn_background).astype(np.float32)
    if state["n"] < o.warmup_frames:
        rate[:] = max(1.0 / (state["n"] + 1), o.learn_background)
    bg += rate[..., None] * (frame - bg)
    state["n"] += 1
    return fg.astype(np.uint8) * 255


def test_the_background_model_computes_its_rule():
    rng = np.random.default_rng(3)
    o = MotionOptions(warmup_frames=4)
    model, state = BackgroundModel(o), {}
    scene = rng.integers(40, 200, (72, 96, 3), np.uint8)
    moved = 0
    for t in range(12):
        image = scene.copy()
        image[20:40, 5 + 6 * t:25 + 6 * t] = 250  # something bright crossing
        image[50:70, 60:90] = (image[50:70, 60:90] * 0.7).astype(np.uint8)  # a shadow
        image = np.clip(image.astype(np.int16) + rng.integers(-3, 4, image.shape), 0, 255).astype(np.uint8)
        got, want = model.apply(image), plainly(state, image, o)
        assert got.dtype == np.uint8 and np.array_equal(got, want), f"frame {t}"
        assert np.array_equal(model.background, state["bg"]), f"frame {t}"
        moved += int(got[20:40].any())
    assert moved >= 6, "the crossing object is foreground once the warm-up is over"
