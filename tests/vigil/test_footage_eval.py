"""`vigil eval detector --footage`: the hand labels, how they are scored, and the pretrained
COCO detector's figures on them (issue 48's bar: person AP50 >= 0.80, and the default
people counter's live tracks within 0.6 of the people in view, per labelled frame)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from models.detection_eval import DetectionEvaluator
from sample_videos.footage import LABELS, LabelledFrame, load_footage
from support.footage import need_coco, need_vtest
from support.processes import ROOT
from vigil.footage_eval import eval_footage, format_footage_table, track_spans, tracks_alive


def test_a_head_count_is_right_anywhere_from_the_people_to_those_plus_the_ignored():
    frame = LabelledFrame(0, np.zeros((3, 4)), np.zeros((2, 4)), np.zeros((0, 4)))
    assert [frame.count_error(n) for n in range(7)] == [3, 2, 1, 0, 0, 0, 1]


def test_a_detection_in_an_ignore_region_is_neither_right_nor_wrong():
    person, ignore = np.array([[0, 0, 10, 30]]), np.array([[50, 0, 60, 30]])
    found = np.array([[0, 0, 10, 30], [51, 1, 59, 29], [100, 0, 110, 30]], np.float64)

    def ap(boxes, scores, ignored):
        evaluator = DetectionEvaluator(("person",))
        evaluator.add(boxes, scores, np.zeros(len(scores), np.int64), person, np.zeros(1, np.int64), ignored)
        return evaluator.result()["map"]

    # the ignored detection scores highest: without the region it is a false positive first
    scores = np.array([0.5, 0.9, 0.1])
    assert ap(found[:2], scores[:2], ignore) == 1.0
    assert ap(found[:2], scores[:2], None) == 0.5
    # one outside every region still counts against
    assert ap(found[[2, 0]], np.array([0.9, 0.5]), ignore) == 0.5


def test_the_labels_cover_twenty_frames_and_every_box_is_inside_the_frame():
    doc = json.loads((LABELS / "vtest.labels.json").read_text())
    assert len(doc["frames"]) >= 20
    people = [len(f["person"]) for f in doc["frames"].values()]
    assert min(people) >= 2 and max(people) <= 12, people  # from 2 to 9 people in view


def test_a_box_outside_the_frame_or_an_unknown_name_is_named(tmp_path, monkeypatch):
    import sample_videos.footage as footage

    (tmp_path / "bad.labels.json").write_text(json.dumps(
        {"video": "bad.avi", "size": [64, 48], "frames": {"3": {"person": [[0, 0, 70, 10]]}}}))
    monkeypatch.setattr(footage, "LABELS", tmp_path)
    with pytest.raises(ValueError, match=r"bad.labels.json frame 3: box \[0.0, 0.0, 70.0, 10.0\] .* inside 64x48"):
        load_footage("bad")
    with pytest.raises(ValueError, match=r"no labelled footage 'nope' \(have \['bad'\]\)"):
        load_footage("nope")


def test_tracks_alive_run_from_their_start_to_their_end(tmp_path):
    events = [{"type": "track_start", "track_id": 1, "t_ms": 100.0}, {"type": "track_end", "track_id": 1, "t_ms": 500.0},
              {"type": "track_start", "track_id": 2, "t_ms": 300.0}, {"type": "line_cross", "track_id": 2, "t_ms": 400.0}]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in events))
    spans = track_spans(path)
    assert [tracks_alive(spans, t) for t in (50.0, 100.0, 300.0, 500.0, 600.0)] == [0, 1, 2, 2, 1]


@pytest.mark.slow
def test_coco_on_the_labelled_frames_of_vtest(capsys):
    need_vtest(), need_coco()
    result = eval_footage("vtest", ROOT / "configs/models", "cpu", ["coco"])
    rows = {row["detector"]: row for row in result["detectors"]}
    (app,) = result["apps"]
    print(format_footage_table(result))
    assert set(rows) == {"coco:1", "coco:2"} and app["app"] == "people-counter"
    assert rows["coco:2"]["person_ap50"] >= 0.80 and rows["coco:1"]["person_ap50"] >= 0.80, rows
    assert min(rows["coco:2"]["vehicle_ap50"], rows["coco:1"]["vehicle_ap50"]) >= 0.8, rows  # the parked van and car
    assert app["tracks_mae"] <= 0.6, app
    assert len(app["tracks"]) == len(result["frames"]) >= 20
