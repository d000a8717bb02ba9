"""The motion detector's background model computes, bit for bit, the rule its docstring
states, written here plainly: gain-compensated difference, shadows left out, a slower
update where the scene looks like foreground, and foreground that matches the recent
scene (nothing moves there) taken into the background at once."""

from __future__ import annotations

import math

import numpy as np

from apps.detectors.motion import BackgroundModel, MotionOptions

PERIOD_MS = 200.0  # a motion app's 5 fps


def plainly(state: dict, image: np.ndarray, t_ms: float, o: MotionOptions) -> np.ndarray:
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
    if state.get("recent") is None:
        state["recent"], state["t"] = frame.copy(), t_ms
    alpha = 1.0 - math.exp(-(t_ms - state["t"]) / 1000.0 / o.still_s)
    state["recent"] += np.float32(alpha) * (frame - state["recent"])
    state["t"] = t_ms
    still = fg & (np.abs(frame - state["recent"]).max(axis=2) <= o.threshold)
    rate = np.where(fg, o.learn_foreground, o.learn_background).astype(np.float32)
    if state["n"] < o.warmup_frames:
        rate[:] = max(1.0 / (state["n"] + 1), o.learn_background)
    rate[still] = 1.0
    bg += rate[..., None] * (frame - bg)
    state["n"] += 1
    return (fg & ~still).astype(np.uint8) * 255


def test_the_background_model_computes_its_rule():
    rng = np.random.default_rng(3)
    o = MotionOptions(warmup_frames=4, still_s=1.0)
    model, state = BackgroundModel(o), {}
    scene = rng.integers(40, 200, (72, 96, 3), np.uint8)
    moved = stood = 0
    for t in range(24):
        image = scene.copy()
        image[20:40, 5 + 6 * t:25 + 6 * t] = 250  # something bright crossing
        image[50:70, 60:90] = (image[50:70, 60:90] * 0.7).astype(np.uint8)  # a shadow
        if t >= 8:
            image[2:14, 2:14] = 10  # something dark that stops there
        image = np.clip(image.astype(np.int16) + rng.integers(-3, 4, image.shape), 0, 255).astype(np.uint8)
        got, want = model.apply(image, t * PERIOD_MS), plainly(state, image, t * PERIOD_MS, o)
        assert got.dtype == np.uint8 and np.array_equal(got, want), f"frame {t}"
        assert np.array_equal(model.background, state["bg"]), f"frame {t}"
        moved += int(got[20:40].any())
        stood += int(got[2:14, 2:14].any())
    assert moved >= 12, "the crossing object is foreground once the warm-up is over"
    assert 0 < stood < 16, "the one that stopped is foreground, then background"


def test_a_region_the_background_learnt_wrong_shrinks_to_what_moves_though_people_keep_crossing_it():
    """The background learns a dark band across a path during the warm-up (people walking
    there, as on vtest.avi's walkway), and people go on crossing it, one every 1.6 s. The
    band is not moving: within a few seconds only the crossing person is foreground. With
    the slow foreground rate alone, the band stays for the minute that rate takes."""
    rng = np.random.default_rng(5)
    ground = rng.integers(150, 190, (60, 200, 3), np.uint8)

    def foreground(o: MotionOptions) -> list[tuple[int, bool]]:
        """Per frame: foreground pixels outside the crossing person, and whether it was seen."""
        model, out = BackgroundModel(o), []
        for t in range(60):
            image = ground.copy()
            if t < o.warmup_frames:
                image[20:40] = 30  # the band the warm-up learns
            x = 10 * (t % 8) + 40
            image[15:45, x:x + 10] = 250  # a person in a white coat crossing
            fg = model.apply(image, t * PERIOD_MS) > 0
            person = np.zeros(fg.shape, bool)
            person[15:45, x:x + 10] = True
            out.append((int((fg & ~person).sum()), bool(fg[person].mean() > 0.5)))
        return out

    o = MotionOptions(warmup_frames=10, still_s=2.0)
    seen = foreground(o)
    after_warm_up = seen[o.warmup_frames:]
    assert after_warm_up[0][0] > 1000, "the band is foreground once the warm-up ends"
    assert all(stray < 50 for stray, _ in after_warm_up[25:]), "5 s later only the person is"
    assert all(person for _, person in after_warm_up), "the person crossing is foreground all along"
    slow = foreground(MotionOptions(warmup_frames=10, still_s=3600.0))
    assert slow[-1][0] > 1000, "without the still rule the band stays"
