"""Static-frame skipping on constructed frames: noise and lighting pass, objects do not."""

import numpy as np

from apps.skipping import StaticFrameFilter
from apps.spec import SkipOptions

rng = np.random.default_rng(0)
SCENE = rng.integers(40, 200, (360, 640, 3), dtype=np.uint8)


def noisy(image: np.ndarray, sigma: float = 3.0) -> np.ndarray:
    return np.clip(image + rng.normal(0, sigma, image.shape), 0, 255).astype(np.uint8)


def test_static_noisy_frames_are_skipped_after_the_first():
    f = StaticFrameFilter(SkipOptions(max_skip_s=100))
    decisions = [f.should_skip(noisy(SCENE), t * 66.0) for t in range(30)]
    assert decisions[0] is False and all(decisions[1:])
    assert f.num_skipped == 29


def test_a_person_sized_change_is_analysed():
    f = StaticFrameFilter(SkipOptions(max_skip_s=100))
    f.should_skip(noisy(SCENE), 0)
    changed = SCENE.copy()
    changed[200:255, 300:320] = 20  # a dark figure 20 x 55 px
    assert f.should_skip(noisy(changed), 66) is False


def test_a_global_lighting_drift_is_not_a_change():
    f = StaticFrameFilter(SkipOptions(max_skip_s=100))
    f.should_skip(SCENE, 0)
    dimmer = (SCENE * 0.9).astype(np.uint8)
    assert f.should_skip(dimmer, 66) is True


def test_results_are_refreshed_after_max_skip():
    f = StaticFrameFilter(SkipOptions(max_skip_s=1.0))
    decisions = [f.should_skip(SCENE, t * 100.0) for t in range(25)]
    assert [i for i, d in enumerate(decisions) if not d] == [0, 10, 20]
