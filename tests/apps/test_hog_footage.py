"""HOG people counting on real footage: OpenCV's vtest.avi (a fixed camera over a
campus walkway), shipped by Debian's opencv-doc, which `.ci/run` installs.

What a person sees there, counted by eye: 6 people at 4.0 s (three by the lamp post,
two walking across, one entering at the right edge) and 7 at 11.0 s."""

import json
from pathlib import Path

import pytest

from apps.spec import load_spec
from runtime.offline import RunOptions, run_offline
from support.footage import need_vtest

SEEN_BY_EYE = {4000.0: 6, 11000.0: 7}


@pytest.mark.slow
def test_hog_people_counter_on_real_footage(tmp_path):
    vtest = need_vtest()
    spec = load_spec(str(Path(__file__).resolve().parents[2] / "configs/apps/people-counter-hog.yaml"))
    summary = run_offline(str(vtest), [spec], RunOptions(tmp_path, video=False, max_frames=120, block_frames=4))
    assert summary["apps"]["people-counter-hog"]["dropped"] == {}  # every frame analysed
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    start = {e["track_id"]: e["t_ms"] for e in events if e["type"] == "track_start"}
    end = {e["track_id"]: e["t_ms"] for e in events if e["type"] == "track_end"}
    assert set(start) == set(end)
    for t_ms, seen in SEEN_BY_EYE.items():
        alive = sum(1 for k in start if start[k] <= t_ms <= end[k])
        assert abs(alive - seen) <= 2, f"at {t_ms / 1000} s: {alive} tracked, {seen} seen"
    # no storm of short-lived tracks: about a dozen people pass in these 12 s
    durations = [end[k] - start[k] for k in start]
    assert summary["apps"]["people-counter-hog"]["tracks"] <= 20
    assert sum(d < 1000 for d in durations) <= 0.25 * len(durations)
