"""The built-in apps for real cameras on real footage: OpenCV's vtest.avi (a fixed camera
over a campus walkway), shipped by Debian's opencv-doc. Two vehicles stand parked at the
top right all along, a van and a car; people walk the walkway."""

import json

import cv2
import numpy as np
import pytest

from apps.detectors import build_host_detector
from apps.spec import load_spec
from core.frames import Frame, FrameBlock
from runtime.offline import RunOptions, run_offline
from support.footage import need_coco, need_vtest
from support.processes import ROOT


@pytest.fixture(scope="module")
def demo_start(tmp_path_factory) -> tuple[dict, list[dict]]:
    """`make demo`'s counters on the footage's first 22 s: its summary and events."""
    vtest, _ = need_vtest(), need_coco()
    out = tmp_path_factory.mktemp("demo")
    specs = [load_spec(str(ROOT / "configs/apps/vtest-people-counter.yaml")), load_spec("vehicle-counter")]
    summary = run_offline(str(vtest), specs, RunOptions(out, video=False, max_frames=220))
    return summary, [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_the_parked_van_and_car_are_two_tracks_though_their_class_flickers(demo_start):
    """coco calls the van a truck and, on some frames, a bus as well (a second box on it),
    and the car a car and a truck: without class groups those second boxes make tracks
    of their own."""
    summary, events = demo_start
    assert summary["apps"]["vehicle-counter"]["tracks"] == 2
    ends = [e for e in events if e["app"] == "vehicle-counter" and e["type"] == "track_end"]
    assert sorted(e["class"] for e in ends) == ["car", "truck"]  # each its majority class


@pytest.mark.slow
def test_the_demos_line_counts_people_walking_the_walkway_both_ways(demo_start):
    summary, events = demo_start
    walkway = summary["apps"]["people-counter"]["lines"]["walkway"]
    assert walkway["in"] >= 1 and walkway["out"] >= 1
    crossed = [e for e in events if e["type"] == "line_cross"]
    assert len({e["track_id"] for e in crossed}) >= 3  # people, not one jittering box


@pytest.mark.slow
def test_motion_boxes_stay_the_size_of_what_moves():
    """Once its warm-up is over, motion boxes are the size of people: one is under 2% of
    the frame, a group walking close together a few times that. Regions the background
    learnt wrong (a trail where people walked during the warm-up, or lingered) are let
    go within seconds, not grown over half the frame for a minute."""
    vtest = need_vtest()
    detector = build_host_detector("motion")
    warm_up_ms = detector.options.warmup_frames * 200.0 + 3000.0  # and the trail it leaves
    capture = cv2.VideoCapture(str(vtest))
    shares, index = [], 0
    while True:
        ok, bgr = capture.read()
        if not ok:
            break
        if index % 2 == 0:  # the app's 5 fps of the file's 10
            t_ms = index * 100.0
            frame = Frame("vtest", index, t_ms, t_ms, cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))
            found = detector.detect(FrameBlock.from_frames(0, [frame]))[0]
            size = (found.xyxy[:, 2:] - found.xyxy[:, :2]).prod(axis=1) / (bgr.shape[0] * bgr.shape[1])
            if t_ms >= warm_up_ms:
                shares.append(float(size.max()) if len(size) else 0.0)
        index += 1
    assert index > 700 and len(shares) > 300
    assert max(shares) < 0.15, f"largest box {max(shares):.1%} of the frame"
    assert np.percentile(shares, 95) < 0.08 and np.median(shares) < 0.03
