"""Static-frame skipping on a rendered clip whose street empties for a while."""

import pytest

from apps.spec import SkipOptions, load_spec
from runtime.offline import RunOptions, run_offline
from sample_videos.render import RenderConfig, write_clip


@pytest.mark.slow
def test_skipping_saves_inferences_and_keeps_counts(tmp_path):
    clip = tmp_path / "quiet.mp4"
    # nobody new arrives for the first 42 s: the street empties after about 23 s; at 10
    # frames a second, two thirds of the frames to render and detect that 15 would take
    write_clip(RenderConfig(seed=78, duration_s=50.0, fps=10.0, density=0.6, quiet=((0.0, 42.0),)), clip)
    runs = {}
    for skip in (False, True):
        specs = [load_spec(n).model_copy(update={"skip_static": SkipOptions() if skip else None})
                 for n in ("people-counter-scenedet", "vehicle-counter-scenedet")]
        runs[skip] = run_offline(str(clip), specs, RunOptions(tmp_path / f"out{skip}", video=False))
    for app in ("people-counter-scenedet", "vehicle-counter-scenedet"):
        plain, skipping = runs[False]["apps"][app], runs[True]["apps"][app]
        assert skipping["skipped"] > 0 and plain["skipped"] == 0
        assert skipping["inferences"] <= 0.7 * plain["inferences"], (skipping["inferences"], plain["inferences"])
        assert skipping["lines"] == plain["lines"]
