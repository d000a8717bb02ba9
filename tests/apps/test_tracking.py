"""The tracker behind apps: either kind from the `trackers` package, on constructed
detections, timed by stream time."""

import numpy as np
import pytest

from apps.spec import TrackerOptions
from apps.tracking import Tracker, group_of_class, one_box_per_object
from core.detections import Detections
from factories import box_at, make_detections

KINDS = ["bytetrack", "ocsort"]


def walk(tracker: Tracker, start_ms: float, num_frames: int, x0: float = 20.0, period_ms: float = 100.0,
         class_ids=None) -> list[Detections]:
    """One person walking right, a detection per frame."""
    return [tracker.update(make_detections([box_at(x0 + 3 * i, 50)], [class_ids[i] if class_ids else 0]),
                           start_ms + i * period_ms) for i in range(num_frames)]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("min_hits, confirmed_on", [(1, 2), (2, 2), (3, 3), (4, 4)])
def test_a_track_is_confirmed_on_its_min_hits_th_detection_and_keeps_its_id(kind, min_hits, confirmed_on):
    """A person who turns up once the tracker is running (OC-SORT confirms every track
    of the stream's first frames at once, as the paper's does). Both kinds confirm on
    the same detection; given the same number, OC-SORT's reference waits one longer."""
    tracker = Tracker(TrackerOptions(kind=kind, min_hits=min_hits), fps=10.0)
    parked = box_at(150, 50)
    for i in range(5):
        tracker.update(make_detections([parked]), i * 100.0)
    out = [tracker.update(make_detections([parked, box_at(20 + 3 * i, 50)]), 500.0 + i * 100.0)
           for i in range(10)]
    walking = [d[d.xyxy[:, 0] < 100] for d in out]
    assert [len(d) for d in walking] == [0] * (confirmed_on - 1) + [1] * (11 - confirmed_on)
    assert len({int(d.tracker_id[0]) for d in walking[confirmed_on - 1:]}) == 1
    assert min(int(d.tracker_id[0]) for d in walking[confirmed_on - 1:]) >= 0
    assert all(len(d) - len(w) == 1 for d, w in zip(out, walking))  # the parked car goes on beside it


@pytest.mark.parametrize("kind, hidden_after_a_miss", [("ocsort", 2), ("bytetrack", 0)])
def test_after_a_missed_frame_ocsort_shows_a_track_again_on_its_min_hits_minus_1_th_detection(
        kind, hidden_after_a_miss):
    """As OC-SORT's reference does; ByteTrack keeps a confirmed track's id showing."""
    tracker = Tracker(TrackerOptions(kind=kind, min_hits=4, lost_track_s=2.0), fps=10.0)
    parked = box_at(150, 50)
    for i in range(5):
        tracker.update(make_detections([parked]), i * 100.0)
    out = [tracker.update(make_detections([parked] + ([] if i == 6 else [box_at(20 + 3 * i, 50)])),
                          500.0 + i * 100.0) for i in range(12)]
    walking = [len(d[d.xyxy[:, 0] < 100]) for d in out]
    assert walking[:7] == [0, 0, 0, 1, 1, 1, 0]  # confirmed on its 4th detection; none on frame 6
    assert walking[7:] == [0] * hidden_after_a_miss + [1] * (5 - hidden_after_a_miss)
    assert len({int(d.tracker_id[d.xyxy[:, 0] < 100][0]) for d in out if (d.xyxy[:, 0] < 100).any()}) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_a_lost_track_is_kept_for_lost_track_s_of_stream_time(kind):
    """The same gap in frames is a short or a long one in stream time: a 2 fps app
    misses 1 frame over 0.5 s, a 20 fps app 10; the budget is in seconds either way."""
    empty = make_detections([])
    for period_ms, gap_frames in ((500.0, 1), (50.0, 10)):
        tracker = Tracker(TrackerOptions(kind=kind, min_hits=2, lost_track_s=1.0), fps=1000.0 / period_ms)
        before = walk(tracker, 0.0, 4, period_ms=period_ms)[-1]
        t = 3 * period_ms
        for _ in range(gap_frames):
            t += period_ms
            tracker.update(empty, t)
        # walking on where it would have been: frame 3 + gap_frames + 1 of the walk
        after = walk(tracker, t + period_ms, 3, x0=20.0 + 3 * (4 + gap_frames), period_ms=period_ms)[-1]
        assert after.tracker_id.tolist() == before.tracker_id.tolist(), (period_ms, gap_frames)
    tracker = Tracker(TrackerOptions(kind=kind, min_hits=2, lost_track_s=1.0), fps=10.0)
    before = walk(tracker, 0.0, 4)[-1]
    tracker.update(empty, 2000.0)  # 1.7 s later: the track is gone
    after = walk(tracker, 2100.0, 3, x0=32.0)[-1]
    assert len(after) == 1 and after.tracker_id[0] != before.tracker_id[0]


@pytest.mark.parametrize("kind", KINDS)
def test_a_forgotten_track_does_not_come_back_under_its_id(kind):
    tracker = Tracker(TrackerOptions(kind=kind, min_hits=2, lost_track_s=5.0), fps=10.0)
    before = walk(tracker, 0.0, 4)[-1]
    tracker.forget(int(before.tracker_id[0]))
    after = walk(tracker, 400.0, 3, x0=32.0)[-1]
    assert len(after) == 1 and after.tracker_id[0] != before.tracker_id[0]


def test_the_majority_class_is_the_tracks_class():
    tracker = Tracker(TrackerOptions(min_hits=1), fps=10.0)
    out = walk(tracker, 0.0, 7, class_ids=[0, 0, 0, 2, 0, 2, 0])[1:]  # confirmed from its second frame
    assert [d.class_id.tolist() for d in out] == [[0]] * 6  # the wavering frames keep the track's class
    assert np.all([d.tracker_id[0] == out[0].tracker_id[0] for d in out])


def test_bad_fps_is_named():
    with pytest.raises(ValueError, match="fps must be > 0; was 0"):
        Tracker(TrackerOptions(), fps=0)


@pytest.mark.parametrize("kind", KINDS)
def test_each_boxs_extras_come_back_with_it_from_the_tracker(kind):
    """`Detections.data` goes through the tracker beside its boxes, whichever it keeps
    and in whatever order it answers."""
    tracker = Tracker(TrackerOptions(kind=kind, min_hits=1), fps=10.0)
    for i in range(5):
        xs = np.array([20.0 + 3 * i, 150.0, 300.0 - 3 * i])
        given = make_detections([box_at(x, 50) for x in xs])
        out = tracker.update(Detections(given.xyxy, given.confidence, given.class_id, data={"x": xs}), i * 100.0)
    assert len(out) == 3
    np.testing.assert_allclose(out.data["x"], out.centers[:, 0], atol=1e-3)


VEHICLES = ("person", "bicycle", "car", "truck", "bus")
PERSON, BICYCLE, CAR, TRUCK, BUS = range(5)


@pytest.mark.parametrize("boxes, classes, scores, kept", [
    # one van seen as a truck and a bus at once: the stronger box stays
    ([[0, 0, 80, 50], [1, 1, 81, 52]], [TRUCK, BUS], [0.39, 0.56], [False, True]),
    # two parked cars side by side, overlapping a little: two objects
    ([[0, 0, 80, 50], [50, 0, 130, 50]], [CAR, TRUCK], [0.9, 0.8], [True, True]),
    # a person on a bicycle: classes in no group are never merged
    ([[0, 0, 30, 60], [0, 5, 30, 60]], [PERSON, BICYCLE], [0.9, 0.8], [True, True]),
    # a third box on the van is dropped too, whatever its class in the group
    ([[0, 0, 80, 50], [1, 1, 81, 52], [0, 1, 80, 51]], [CAR, TRUCK, BUS], [0.5, 0.6, 0.4], [False, True, False]),
    # an id past the labels (a model's extra output) is in no group
    ([[0, 0, 80, 50], [1, 1, 81, 52]], [TRUCK, 99], [0.5, 0.6], [True, True]),
])
def test_boxes_of_one_class_group_on_one_object_are_one(boxes, classes, scores, kept):
    group_of = group_of_class([["car", "truck", "bus"]], VEHICLES)
    found = one_box_per_object(make_detections(boxes, classes, scores), group_of)
    assert found.tolist() == kept


def test_class_groups_that_share_a_class_are_one():
    group_of = group_of_class([["car", "truck"], ["bus", "truck"], ["person", "nope"]], VEHICLES)
    assert group_of[CAR] == group_of[TRUCK] == group_of[BUS] >= 0
    assert group_of[BICYCLE] == -1 and group_of[PERSON] not in (-1, group_of[CAR])


@pytest.mark.parametrize("kind", KINDS)
def test_a_vehicle_seen_as_two_classes_at_once_is_one_track_of_its_majority_class(kind):
    """A parked van the detector calls a truck on most frames and a bus on some, and on
    every other three frames a bus too, beside the truck (as COCO's does: its NMS is per
    class). Without class groups the second box makes a second track on the van."""
    van, beside = [300.0, 40.0, 380.0, 100.0], [299.0, 41.0, 381.0, 102.0]
    frames = []
    for i in range(30):
        boxes, classes, scores = [van], [BUS if i % 5 == 4 else TRUCK], [0.55]
        if (i // 3) % 2 == 0:
            boxes, classes, scores = boxes + [beside], classes + [BUS], scores + [0.42]
        frames.append(make_detections(boxes, classes, scores))

    def tracks(options: TrackerOptions) -> tuple[set[int], set[int]]:
        tracker = Tracker(options, fps=5.0, labels=VEHICLES)
        out = [tracker.update(d, i * 200.0) for i, d in enumerate(frames)]
        return {int(t) for d in out for t in d.tracker_id}, {int(c) for d in out for c in d.class_id}

    assert len(tracks(TrackerOptions(kind=kind, min_hits=2))[0]) == 2
    ids, classes = tracks(TrackerOptions(kind=kind, min_hits=2, class_groups=[["car", "truck", "bus"]]))
    assert len(ids) == 1 and classes == {TRUCK}
