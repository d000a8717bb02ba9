"""App logic on constructed detections: tracking, votes, lines, zones, events."""

import numpy as np
import pytest

from apps.app import App
from apps.spec import parse_spec
from factories import box_at, make_block, make_detections

LABELS = ("person", "car", "bike")


def make_app(**overrides) -> App:
    spec = parse_spec({"name": "t", "detector": "scenedet", "classes": ["person"],
                       "lines": {"gate": [[0.5, 1.0], [0.5, 0.0]]},
                       "zones": {"left": [[0, 0], [0.5, 0], [0.5, 1], [0, 1]]},
                       "tracker": {"min_hits": 2, "lost_track_s": 0.5}, **overrides})
    return App(spec, "cam", (200, 100), 10.0, LABELS)


def feed(app: App, positions: list[list[tuple[float, float, int]]]):
    """positions[frame] = [(cx, cy, class_id), ...]"""
    events = []
    block = make_block(num_frames=len(positions), fps=10.0, size=(200, 100))
    dets = [make_detections([box_at(x, y) for x, y, _ in frame], [c for _, _, c in frame]) for frame in positions]
    for i in range(len(positions)):
        e, _ = app.observe(block.select(np.arange(len(positions)) == i), [dets[i]])
        events += e
    return events


def test_person_walking_across_emits_start_zone_exit_cross_and_end():
    app = make_app()
    frames = [[(70 + 4 * i, 50, 0)] for i in range(12)] + [[] for _ in range(8)]
    events = feed(app, frames)
    kinds = [e.type for e in events]
    assert kinds.count("track_start") == 1
    cross = [e for e in events if e.type == "line_cross"]
    at = int(round(cross[0].t_ms / 100.0))  # its frame (10 a second): where the person was then
    assert len(cross) == 1 and cross[0].data == {"line": "gate", "direction": "in",
                                                 "box": [round(float(v), 1) for v in box_at(70 + 4 * at, 50)]}
    assert [e.data["zone"] for e in events if e.type == "zone_enter"] == ["left"]
    assert [e.data["zone"] for e in events if e.type == "zone_exit"] == ["left"]
    assert kinds[-1] == "track_end"  # ended after lost_track_s without detections
    assert events[-1].data["box"] == [round(float(v), 1) for v in box_at(70 + 4 * 11, 50)]  # where it was last seen
    assert app.counts()["lines"]["gate"] == {"in": 1, "out": 0, "by_class": {"person": {"in": 1, "out": 0}}}
    assert app.num_tracks == 1


def test_other_classes_are_tracked_but_not_counted():
    app = make_app()
    events = feed(app, [[(70 + 4 * i, 50, 1)] for i in range(12)])
    assert [e for e in events if e.type in ("track_start", "line_cross")] == []
    assert app.counts()["tracks"] == 0


def test_majority_vote_steadies_a_wavering_class():
    app = make_app()
    classes = [0, 0, 2, 0, 2, 0, 0, 2, 0, 0, 0, 0]  # mostly person, sometimes "bike"
    events = feed(app, [[(70 + 4 * i, 50, c)] for i, c in enumerate(classes)])
    crossings = [e for e in events if e.type == "line_cross"]
    assert len(crossings) == 1 and crossings[0].cls == "person"


def test_low_confidence_detections_are_ignored():
    app = make_app(min_confidence=0.95)
    events = feed(app, [[(70 + 4 * i, 50, 0)] for i in range(12)])
    assert events == []


def test_finish_ends_open_tracks():
    app = make_app()
    feed(app, [[(20, 50, 0)] for _ in range(4)])
    ends = app.finish()
    assert [e.type for e in ends] == ["zone_exit", "track_end"]


def test_a_classifiers_best_class_is_kept_per_frame_and_its_changes_are_events():
    from core.classes import Classes

    app = App(parse_spec({"name": "scene", "detector": "cls", "top_k": 2, "min_confidence": 0.5}),
              "cam", (200, 100), 10.0, LABELS)
    probs = [(0.7, 0.2, 0.1), (0.6, 0.3, 0.1), (0.4, 0.35, 0.25), (0.1, 0.8, 0.1), None, (0.2, 0.1, 0.7)]
    block = make_block(num_frames=len(probs), fps=10.0, size=(200, 100))
    events, results = app.observe(block, [make_detections([], [])] * len(probs),
                                  [None if p is None else Classes(np.array(p)) for p in probs])
    assert [(e.type, e.cls, e.data["from"]) for e in events] == [
        ("class_change", "person", None), ("class_change", "car", "person"), ("class_change", "bike", "car")]
    assert events[1].data["classes"] == [["car", 0.8], ["person", 0.1]]  # top_k, best first
    assert [r.classes[0][0] if r.classes else None for r in results] == ["person", "person", "person", "car",
                                                                           None, "bike"]
    # the frame under min_confidence keeps its classes but changes nothing and counts for none
    assert app.counts()["classes"] == {"current": "bike", "frames": {"bike": 1, "car": 1, "person": 2},
                                       "last": [["bike", 0.7], ["person", 0.2]]}
    assert app.num_found == 4  # what keeps a classifier app from being called quiet


def test_a_classifier_app_chooses_among_its_classes():
    from core.classes import Classes

    app = App(parse_spec({"name": "scene", "detector": "cls", "classes": ["car", "bike"], "min_confidence": 0}),
              "cam", (200, 100), 10.0, LABELS)
    block = make_block(num_frames=1, fps=10.0, size=(200, 100))
    events, results = app.observe(block, [make_detections([], [])], [Classes(np.array([0.7, 0.1, 0.2]))])
    assert results[0].classes == [("bike", pytest.approx(0.2)), ("car", pytest.approx(0.1))]
    assert [e.cls for e in events] == ["bike"]


def test_the_tracker_is_told_the_frames_size_to_tell_which_boxes_its_border_may_cut():
    assert make_app(tracker={"min_hits": 2, "appearance": {}}).tracker.frame_size == (200, 100)
