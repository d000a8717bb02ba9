"""`vigil eval tracking`: the stays checks on made-up tracks, the truth's boxes handed
to real apps over a rendered clip, and the command's answers to bad arguments."""

import json
import sys
from pathlib import Path

import pytest

from apps.spec import load_spec
from support.processes import run_command
from vigil.tracking_eval import (TRACKED_APPS, Clip, bundled_clips, counted_stays, eval_tracking, run_on_truth,
                                 stay_outcomes, stays_followed, stays_within, truth_boxes)

PEOPLE = load_spec("people-counter-scenedet")
ZONE = "crosswalk"
assert ZONE in PEOPLE.zones


def _truth() -> dict:
    """Two people 40 px apart, both at the crosswalk from 1 s to 5 s; person 2 is hidden
    on the frame at 3 s."""
    frames = []
    for k in range(7):
        t = 1000.0 * k
        objects = [{"track_id": 1, "class": "person", "xyxy": [100, 100, 120, 160], "visible": 1.0},
                   {"track_id": 2, "class": "person", "xyxy": [160, 100, 180, 160],
                    "visible": 0.1 if k == 3 else 1.0},
                   {"track_id": 3, "class": "car", "xyxy": [300, 200, 380, 240], "visible": 0.9}]
        frames.append({"frame": k, "t_ms": t, "objects": objects})
    stays = [{"track_id": p, "class": "person", "zone": ZONE, "enter_ms": 1000.0, "exit_ms": 5000.0,
              "dwell_ms": 4000.0} for p in (1, 2)]
    stays.append({"track_id": 3, "class": "car", "zone": "nowhere", "enter_ms": 0.0, "exit_ms": 1000.0,
                  "dwell_ms": 1000.0})
    return {"classes": ["person", "car", "bike"], "frames": frames, "stays": stays}


def _stay(track: int, enter_box: list, exit_box: list, enter_ms: float = 1000.0, exit_ms: float = 5000.0) -> list:
    app = PEOPLE.name
    return [{"type": "zone_enter", "app": app, "track_id": track, "zone": ZONE, "class": "person",
             "t_ms": enter_ms, "entered_ms": enter_ms, "box": enter_box},
            {"type": "zone_exit", "app": app, "track_id": track, "zone": ZONE, "class": "person",
             "t_ms": exit_ms, "left_ms": exit_ms, "dwell_ms": exit_ms - enter_ms, "box": exit_box}]


ONE, TWO = [100, 100, 120, 160], [160, 100, 180, 160]


def test_only_the_apps_zones_and_classes_are_counted():
    assert [(owner, s["track_id"]) for owner, s in counted_stays(_truth(), [PEOPLE])] == [(PEOPLE.name, 1),
                                                                                         (PEOPLE.name, 2)]


def test_a_stay_is_followed_when_its_own_track_made_it():
    events = _stay(7, ONE, ONE) + _stay(8, TWO, TWO)
    assert stays_followed(events, _truth(), [PEOPLE]) == 1.0
    assert stays_within(events, _truth(), [PEOPLE]) == 1.0


def test_a_track_that_slid_onto_a_neighbour_is_within_by_time_but_not_followed():
    events = _stay(7, ONE, TWO)  # entered on person 1, left on person 2
    assert stays_followed(events, _truth(), [PEOPLE]) == 0.0
    assert stays_within(events, _truth(), [PEOPLE]) == 1.0  # by time, its one exit matches both stays


def test_a_stay_cut_short_by_more_than_half_a_second_is_missed():
    events = _stay(7, ONE, ONE, exit_ms=4000.0) + _stay(8, TWO, TWO)
    assert stays_followed(events, _truth(), [PEOPLE]) == 0.5
    assert stays_within(events, _truth(), [PEOPLE]) == 1.0  # by time, person 2's exit matches person 1's stay too
    assert stays_within(events[:2], _truth(), [PEOPLE]) == 0.0


def test_an_exit_unseen_takes_its_box_from_the_track_end():
    events = _stay(7, ONE, ONE)
    del events[1]["box"]
    events.append({"type": "track_end", "app": PEOPLE.name, "track_id": 7, "class": "person", "t_ms": 5000.0,
                   "box": ONE})
    assert stays_followed(events, _truth(), [PEOPLE]) == 0.5


@pytest.mark.parametrize("events, person_1, person_2", [
    (_stay(7, ONE, ONE) + _stay(8, TWO, TWO), ("followed", 7, 0.0), ("followed", 8, 0.0)),
    # a track switch at 3 s: person 1's stay went to tracks 7 and 9
    (_stay(7, ONE, ONE, exit_ms=3000.0) + _stay(9, ONE, ONE, enter_ms=3000.0), ("split", 7, -2000.0),
     ("missed", None, None)),
    # track 9 took over person 1 from person 2: it counts for both
    (_stay(7, ONE, ONE, exit_ms=3000.0) + _stay(9, TWO, ONE, enter_ms=3000.0), ("split", 7, -2000.0),
     ("slid", 9, -2000.0)),
    (_stay(7, ONE, ONE, exit_ms=4000.0), ("dwell_off", 7, -1000.0), ("missed", None, None)),
    # a zone_exit on person 1 after the stay is not part of it
    (_stay(7, ONE, ONE, exit_ms=4000.0) + _stay(5, ONE, ONE, enter_ms=6000.0, exit_ms=6000.0),
     ("dwell_off", 7, -1000.0), ("missed", None, None)),
    # a stay cut short does not hide one that follows it
    (_stay(9, ONE, ONE, exit_ms=2000.0) + _stay(7, ONE, ONE), ("followed", 7, 0.0), ("missed", None, None)),
    (_stay(7, ONE, TWO), ("slid", 7, 0.0), ("slid", 7, 0.0)),
    ([], ("missed", None, None), ("missed", None, None)),
])
def test_each_stay_not_followed_says_why(events, person_1, person_2):
    verdicts = stay_outcomes(events, _truth(), [PEOPLE])
    assert [(v["object"], v["zone"], v["dwell_ms"]) for v in verdicts] == [(1, ZONE, 4000.0), (2, ZONE, 4000.0)]
    assert [(v["outcome"], v["track_id"], v["dwell_error_ms"]) for v in verdicts] == [person_1, person_2]
    assert stays_followed(events, _truth(), [PEOPLE]) == [person_1[0], person_2[0]].count("followed") / 2


def test_truth_boxes_are_the_seen_objects_with_the_truths_class_indices():
    boxes = truth_boxes(_truth())
    assert len(boxes[0]) == 3 and boxes[0].class_id.tolist() == [0, 0, 1]
    assert len(boxes[3000]) == 2  # person 2 is hidden there
    assert boxes[3000].xyxy.tolist() == [ONE, [300, 200, 380, 240]]


def test_apps_counting_classes_the_truth_lacks_are_refused(short_clip):
    clip = Clip("short", *short_clip)
    with pytest.raises(ValueError, match="'motion'.*truth has boxes of"):
        run_on_truth(clip, [load_spec("motion")])


def test_given_the_truths_boxes_apps_track_and_count_a_rendered_clip(short_clip):
    """Real apps over a real decoded clip, each handed the truth's boxes: every person
    that crosses a line in the truth is counted, so the boxes reached the trackers."""
    clip = Clip("short", *short_clip)
    events = run_on_truth(clip, [load_spec(n) for n in TRACKED_APPS])
    crossings = [e for e in events if e["type"] == "line_cross"]
    truth = clip.truth
    want = sum(v for line in truth["lines"].values() for by in line["by_class"].values() for v in by.values())
    assert want > 0 and len(crossings) == want
    assert {e["app"] for e in events} <= set(TRACKED_APPS)


@pytest.mark.slow
def test_eval_reports_both_runs_on_a_bundled_clip():
    """street_a: with the truth's boxes people-counter-scenedet's tracks followed every stay when
    measured, with the detector 1.0 of them (0.964 before boxes at the border stopped teaching colour)."""
    clip = next(c for c in bundled_clips() if c.name == "street_a")
    from vigil.settings import MODELS_DIR

    result = eval_tracking([load_spec(n) for n in TRACKED_APPS], [clip], MODELS_DIR, "cpu", log=lambda m: None)
    row = result["clips"][0]
    assert row["stays"] == result["overall"]["stays"] > 0
    assert row["truth"]["followed"] >= 0.95 and row["detector"]["followed"] >= 0.85
    assert row["truth"] == result["overall"]["truth"] and row["detector"] == result["overall"]["detector"]
    for boxes in ("detector", "truth"):  # each stay has one outcome, and those not followed are listed
        assert sum(row[boxes]["outcomes"].values()) == row["stays"]
        unfollowed = row["not_followed"][boxes]
        assert len(unfollowed) == row["stays"] - row[boxes]["outcomes"]["followed"]
        assert all(v["outcome"] != "followed" and v["zone"] in load_spec(v["app"]).zones for v in unfollowed)


@pytest.mark.slow
@pytest.mark.parametrize("name, floor", [("street_b", 0.97), ("street_c", 0.95)])
def test_given_the_truths_boxes_the_tracker_keeps_people_in_a_crowd(name, floor):
    """The tracker's own share, with no detector misses: people-counter-scenedet followed 1.0
    (street_b) and 0.987 (street_c) of the stays when measured (1.0 and 0.973 with a
    colour gate of 60 and weight 1; 1.0 and 0.96 keeping a hidden track 1.5 s; 0.957 and
    0.96 with zone_inertia 1); with a box behind another judged by its whole box (not its
    middle), bottoms never level, and going out of view judged from the frame before,
    0.957 and 0.893; matching by colour without the occlusion and height rules, 0.851
    and 0.827."""
    clip = next(c for c in bundled_clips() if c.name == name)
    specs = [load_spec(n) for n in TRACKED_APPS]
    assert stays_followed(run_on_truth(clip, specs), clip.truth, specs) >= floor


@pytest.mark.slow
@pytest.mark.parametrize("args, message", [
    (["tracking", "--version", "2"], "--version is for `vigil eval detector`"),
    (["detector", "--app", "people-counter-scenedet"], "--app is for `vigil eval tracking`"),
    (["tracking", "--app", "no-such-app"], "no-such-app"),
    (["tracking", "--clips", "0"], "--clips must be in 1..100"),
])
def test_bad_arguments_are_named(args, message):
    done = run_command([sys.executable, "-m", "cli", "eval", *args], 120)
    assert done.returncode == 1 and message in done.stderr, done.stderr
    assert done.stdout == ""


def test_bundled_clips_have_their_truth():
    clips = bundled_clips()
    assert [c.name for c in clips] == ["street_a", "street_b", "street_c"]
    assert all(Path(c.video).is_file() and json.dumps(c.truth)[:1] == "{" for c in clips)
