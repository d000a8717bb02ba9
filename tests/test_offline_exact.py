"""A file is not a camera: `vigil run` analyses every sampled frame however busy the
machine is, so its events are the same, event for event, on an idle machine and on one
whose cores are all taken by other processes. Latency against the SLO is still measured
(and shows the load); `--realtime` paces the file like a live camera and drops again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import contextmanager

import pytest
from test_run import count_errors

from apps.spec import load_spec
from runtime.busy_machine import SLO_GOAL
from runtime.offline import RunOptions, run_offline
from support.clips import BUNDLED, load_truth

CLIP = next(c for c in BUNDLED if c.stem == "street_b")  # the clip that once lost 210 of 450 frames


@contextmanager
def cores_kept_busy():
    """One spinning process per core (and one more), at the test's own priority."""
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range((os.cpu_count() or 2) + 1)]
    try:
        yield
    finally:
        for p in spin:
            p.kill()
            p.wait()


def run(out, realtime: bool = False) -> dict:
    specs = [load_spec("people-counter-scenedet"), load_spec("vehicle-counter-scenedet")]
    return run_offline(str(CLIP), specs, RunOptions(out, video=False, realtime=realtime))


@pytest.mark.slow
@pytest.mark.exclusive  # its idle run needs an idle machine, and its spinning processes would slow every other test
def test_events_do_not_depend_on_how_busy_the_machine_is(tmp_path):
    idle = run(tmp_path / "idle")
    with cores_kept_busy():
        loaded = run(tmp_path / "loaded")
    for summary in (idle, loaded):
        assert summary["error"] is None
        assert all(app["dropped"] == {} for app in summary["apps"].values()), summary["apps"]
        assert count_errors(summary, load_truth(CLIP), 0.05) == []
    events = [(tmp_path / d / "events.jsonl").read_text().splitlines() for d in ("idle", "loaded")]
    assert events[0], "the clip has events"
    assert events[0] == events[1]
    assert loaded["wall_s"] > idle["wall_s"]  # the load was real
    # and the loaded run says so: what others took, and, for an app short of its SLO, why in words
    assert loaded["machine"]["others_cores"] >= 1.0
    for name, app in loaded["apps"].items():
        if app["slo_attainment"] < SLO_GOAL:
            assert any(name in n["apps"] and n["text"].startswith("Other processes took") for n in loaded["notes"])


@pytest.mark.slow
def test_realtime_paces_the_file_and_may_drop(short_clip, tmp_path):
    clip, truth = short_clip
    specs = [load_spec("people-counter-scenedet").model_copy(update={"slo_ms": 1.0})]  # no frame can make 1 ms
    summary = run_offline(str(clip), specs, RunOptions(tmp_path, video=False, realtime=True))
    assert summary["realtime"] is True
    # paced at the clip's frame rate: no faster than the clip lasts
    assert summary["wall_s"] >= 0.9 * truth["num_frames"] / truth["fps"]
    dropped = summary["apps"]["people-counter-scenedet"]["dropped"]
    assert sum(dropped.values()) > 0 and set(dropped) <= {"deadline"}, dropped
    exact = run_offline(str(clip), specs, RunOptions(tmp_path / "exact", video=False))
    assert exact["apps"]["people-counter-scenedet"]["dropped"] == {}
    assert json.loads((tmp_path / "exact" / "summary.json").read_text())["apps"]["people-counter-scenedet"][
        "slo_attainment"] == 0.0  # measured against the SLO all the same
