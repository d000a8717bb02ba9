"""Colour as the tracker's second cue (apps/appearance.py, OC-SORT's appearance gate and
likeness): on painted frames, where the boxes' places alone would join the wrong ones."""

import numpy as np
import pytest

from apps.appearance import behind, colours, looks
from apps.border import cut
from apps.spec import AppearanceOptions, TrackerOptions
from apps.tracking import Tracker
from factories import make_detections

RED, BLUE, GREY = (200, 30, 30), (30, 30, 200), (90, 90, 90)


def painted(*figures: tuple[list[float], tuple[int, int, int]]) -> np.ndarray:
    """A grey 100x200 frame with each (box, colour) filled in."""
    frame = np.full((100, 200, 3), GREY, np.uint8)
    for (x1, y1, x2, y2), colour in figures:
        frame[int(y1):int(y2), int(x1):int(x2)] = colour
    return frame


def test_a_box_looks_like_the_middle_of_what_it_holds():
    box = [20.0, 20.0, 32.0, 60.0]
    frame = painted((box, RED))
    frame[20:28, 20:32] = (250, 220, 180)  # a head above the middle: not counted
    frame[50:60, 20:32] = (20, 20, 60)  # legs below it: not counted
    got = colours(frame, np.array([box, [195.0, 0.0, 205.0, 20.0], [50.0, 50.0, 50.0, 60.0]]))
    assert got[0].tolist() == list(RED)
    assert got[1].tolist() == list(GREY)  # cut by the frame's edge: the part inside
    assert np.isnan(got[2]).all()  # no width: nothing to compare


def test_a_box_is_behind_another_that_covers_its_middle_and_stands_nearer_the_camera():
    boxes = np.array([[0, 0, 10, 20], [5, 0, 15, 22], [40, 0, 50, 20], [48, 0, 58, 22], [70, 0, 80, 20],
                      [75, 0, 85, 21], [100, 0, 110, 20], [105, 0, 115, 30]], np.float64)
    # the first two: the second covers half the middle of the first and its bottom is
    # lower, so the first is behind it. The next two share a fifth of their boxes but not
    # the first's middle (where its colour is taken): both clear. The next two stand level
    # (bottoms within LEVEL) and cover half of each other's middles: either may be in
    # front, so neither is clear. The last two: the second is nearer by far.
    assert behind(boxes).tolist() == [True, False, False, False, True, True, True, False]
    assert behind(boxes[:1]).tolist() == [False]


def test_boxes_the_frames_border_may_cut_are_not_clear():
    # apart from one another (none behind another): within 4 px of the left, bottom, top
    # and right borders, and 5 px or more from them
    boxes = np.array([[4, 20, 10, 60], [20, 20, 30, 60], [40, 50, 50, 96], [60, 4, 70, 40], [80, 10, 90, 90],
                      [175, 20, 185, 60], [186, 20, 196, 60], [120, 5, 130, 50], [140, 20, 150, 95]], np.float64)
    assert cut(boxes, (200, 100)).tolist() == [True, False, True, True, False, False, True, False, False]
    colour = np.zeros((len(boxes), 3), np.float32)
    assert looks(colour, boxes).clear.all()  # with no frame size, as before
    assert looks(colour, boxes, (200, 100)).clear.tolist() == [False, True, False, False, True, True, False, True,
                                                              True]
    assert cut(boxes, (100, 200)).tolist() != cut(boxes, (200, 100)).tolist()  # (width, height)


@pytest.mark.parametrize("frame_size, kept", [((200, 100), True), (None, False)])
def test_a_track_coming_in_at_the_border_learns_its_colour_once_it_is_in(frame_size, kept):
    """Half a second of a person cut by the frame's left border, where the middle of the
    part in view is their green bag; then the whole person, whose middle is red. Given
    the frame's size the track learned nothing from the cut boxes and goes on; without
    it the track is green, red is past the gate, and a new track starts."""
    tracker = _tracker({}, frame_size)
    cut_box, whole = [0.0, 20.0, 10.0, 60.0], [5.0, 20.0, 17.0, 60.0]
    for i in range(5):
        coming = _update(tracker, [cut_box], i * 100.0, (cut_box, (30, 200, 30)))
    for t_ms in (500.0, 600.0):
        inside = _update(tracker, [whole], t_ms, (whole, RED))
    assert (inside.tracker_id.tolist() == coming.tracker_id.tolist()) is kept


def _tracker(appearance: dict | None, frame_size: tuple[int, int] | None = None) -> Tracker:
    options = TrackerOptions(min_hits=1, appearance=None if appearance is None else AppearanceOptions(**appearance))
    return Tracker(options, fps=10.0, frame_size=frame_size)


def _update(tracker: Tracker, boxes: list[list[float]], t_ms: float, *figures):
    """One frame of `boxes`, their colours measured on the painted `figures`."""
    dets = make_detections(boxes)
    return tracker.update(dets, t_ms, colours(painted(*figures), dets.xyxy))


def _ids_of(out, box: list[float]) -> list[int]:
    return [int(t) for b, t in zip(out.xyxy.tolist(), out.tracker_id) if np.allclose(b, box)]


@pytest.mark.parametrize("by_colour", [False, True])
def test_someone_else_in_a_tracks_place_does_not_continue_it(by_colour):
    """Red stands at a place for half a second; then blue is there instead. By place
    alone blue continues red's track; by colour blue is a new one."""
    tracker = _tracker({} if by_colour else None)
    box = [40.0, 20.0, 52.0, 60.0]
    for i in range(5):
        red = _update(tracker, [box], i * 100.0, (box, RED))
    for t_ms in (500.0, 600.0):  # a new track has its id from its second frame
        blue = _update(tracker, [box], t_ms, (box, BLUE))
    assert (blue.tracker_id[0] == red.tracker_id[0]) is not by_colour


@pytest.mark.parametrize("appearance, kept", [
    (None, False),
    ({}, True),
    ({"gate": 442.0, "weight": 0.0}, False),  # a gate nothing reaches and no likeness: by place alone
    ({"gate": 442.0, "weight": 1.0}, True),  # the likeness alone keeps them apart
])
def test_two_people_passing_keep_their_own_tracks(appearance, kept):
    """Red and blue stand side by side, then step past each other: each new box overlaps
    the other's track more than its own, so by place alone they swap tracks."""
    tracker = _tracker(appearance)
    red_at, blue_at = [20.0, 20.0, 30.0, 60.0], [32.0, 20.0, 42.0, 60.0]
    for i in range(5):
        before = _update(tracker, [red_at, blue_at], i * 100.0, (red_at, RED), (blue_at, BLUE))
    red_track, blue_track = _ids_of(before, red_at), _ids_of(before, blue_at)
    red_now, blue_now = [27.0, 20.0, 37.0, 60.0], [17.0, 20.0, 27.0, 60.0]
    after = _update(tracker, [red_now, blue_now], 500.0, (red_now, RED), (blue_now, BLUE))
    assert (_ids_of(after, red_now) == red_track) is kept
    assert (_ids_of(after, red_now) == blue_track) is not kept


def test_a_track_learns_only_from_clear_boxes():
    """A box behind another may show some of it: the track is matched with it (the
    colours are near enough) but keeps its own colour."""
    tracker = _tracker({})
    red_at = [20.0, 20.0, 30.0, 60.0]
    _update(tracker, [red_at], 0.0, (red_at, RED))
    in_front = [25.0, 22.0, 35.0, 62.0]  # nearer the camera, over half of the middle of red's box
    _update(tracker, [red_at, in_front], 100.0, (red_at, RED), (in_front, (200, 30, 60)))
    tracks = tracker._tracker.tracks
    assert len(tracks) == 2 and tracks[0].last.tolist() == red_at  # red's track went on
    assert tracks[0].look.tolist() == list(RED)
    assert tracks[1].look.tolist() == [200, 30, 60]  # the box in front is clear


def test_a_box_behind_another_is_not_refused_for_the_colour_in_front_of_it():
    """Blue steps in front of red and covers most of the middle of red's box: red's box now
    measures blue, far past the gate, but it is behind blue's, so its colour counts for
    a quarter and red's track goes on."""
    tracker = _tracker({})
    red_at = [20.0, 20.0, 30.0, 60.0]
    for i in range(5):
        red = _update(tracker, [red_at], i * 100.0, (red_at, RED))
    blue_at = [24.0, 22.0, 36.0, 62.0]
    frame = painted((red_at, RED), (blue_at, BLUE))
    measured = colours(frame, np.array([red_at]))[0]
    assert np.linalg.norm(measured - np.array(RED)) > 60.0  # by its colour alone, someone else
    for t_ms in (500.0, 600.0):
        both = _update(tracker, [red_at, blue_at], t_ms, (red_at, RED), (blue_at, BLUE))
    assert _ids_of(both, red_at) == [int(red.tracker_id[0])]


def test_a_track_follows_a_colour_that_drifts_past_the_gate_step_by_step():
    """A track remembers its last clear colours as they were, beside their running
    mean: a shade two steps from its first is near the last step, though the mean still
    lies past the gate. A colour near none of them starts a new track."""
    tracker = _tracker({})
    box = [40.0, 20.0, 52.0, 60.0]
    first = (100, 100, 100)
    for i in range(5):
        out = _update(tracker, [box], i * 100.0, (box, first))
    track = int(out.tracker_id[0])
    for i, shade in enumerate([(100, 150, 100), (100, 200, 100)]):  # 50 apart each, 100 from the first
        out = _update(tracker, [box], 500.0 + i * 100.0, (box, shade))
        assert out.tracker_id.tolist() == [track]
    assert np.linalg.norm(tracker._tracker.tracks[0].look - np.array(first)) < 20.0  # the mean lags behind
    for t_ms in (700.0, 800.0):
        out = _update(tracker, [box], t_ms, (box, (30, 30, 250)))
    assert out.tracker_id.tolist() != [track]


def test_matching_by_colour_needs_each_boxs_colour():
    with pytest.raises(ValueError, match="needs a colour for each of the 1 boxes; was None"):
        _tracker({}).update(make_detections([[0, 0, 10, 20]]), 0.0)
