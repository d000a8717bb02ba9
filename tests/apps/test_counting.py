import numpy as np
import pytest

from apps.counting import LineCounter, ZoneChange, ZoneMonitor
from apps.geometry import in_polygon, side_of_line
from factories import box_at, make_detections


def vertical_line(x: float = 50.0) -> LineCounter:
    # drawn bottom to top: moving right is "in"
    return LineCounter("gate", np.array([x, 100.0]), np.array([x, 0.0]))


def walk(counter: LineCounter, xs: list[float], track_id: int = 1, y: float = 50.0, class_id: int = 0):
    out = []
    for x in xs:
        out += counter.update(make_detections([box_at(x, y)], [class_id], tracker_id=[track_id]))
    return out


def test_direction_convention_bottom_to_top_line_right_is_in():
    assert side_of_line(np.array([50.0, 100.0]), np.array([50.0, 0.0]), np.array([[60.0, 50.0]]))[0] > 0
    # left to right line: down is in
    assert side_of_line(np.array([0.0, 50.0]), np.array([100.0, 50.0]), np.array([[20.0, 70.0]]))[0] > 0


def test_crossing_right_counts_in_then_back_counts_out():
    c = vertical_line()
    crossings = walk(c, [30, 40, 48, 55, 65])
    assert [x.direction for x in crossings] == ["in"]
    crossings = walk(c, [55, 45, 35])
    assert [x.direction for x in crossings] == ["out"]
    assert (c.total.num_in, c.total.num_out) == (1, 1)


def test_jitter_on_the_line_counts_once():
    c = vertical_line()
    crossings = walk(c, [40, 49.5, 50.5, 49.2, 50.8, 49.9, 51.0, 60])
    assert len(crossings) == 1 and crossings[0].direction == "in"


def test_crossing_outside_the_segment_does_not_count():
    c = vertical_line()
    assert walk(c, [30, 70], y=150.0) == []  # passes below the segment's end


def test_counts_by_class_and_per_track():
    c = vertical_line()
    walk(c, [30, 70], track_id=1, class_id=0)
    walk(c, [30, 70], track_id=2, class_id=1)
    walk(c, [70, 30], track_id=3, class_id=1)
    assert c.by_class[0].to_dict() == {"in": 1, "out": 0}
    assert c.by_class[1].to_dict() == {"in": 1, "out": 1}


def test_a_track_seen_first_on_the_line_needs_to_leave_the_dead_band():
    c = vertical_line()
    assert walk(c, [50.5, 51.0, 60.0]) == []  # never clearly on the left


def test_zone_enter_and_exit_by_foot_point():
    zone = ZoneMonitor("box", np.array([[0, 0], [100, 0], [100, 100], [0, 100]], np.float64))
    # box centred at y=90 with height 20: foot at y=100 is on the edge; y=80 -> foot 90 inside
    entered, exited = zone.update(make_detections([box_at(50, 80)], tracker_id=[7]))
    assert entered == [ZoneChange(7, 0, 0.0)] and exited == []
    entered, exited = zone.update(make_detections([box_at(50, 80)], tracker_id=[7]))
    assert entered == [] and exited == []
    entered, exited = zone.update(make_detections([box_at(150, 80)], tracker_id=[7]))
    assert exited == [ZoneChange(7, 0, 0.0, 0.0)]
    assert zone.num_entered == 1 and zone.occupancy() == {}


def test_zone_keeps_occluded_track_inside_until_it_ends():
    zone = ZoneMonitor("box", np.array([[0, 0], [100, 0], [100, 100], [0, 100]], np.float64))
    zone.update(make_detections([box_at(50, 50)], [2], tracker_id=[3]))
    zone.update(make_detections([]))  # occluded: no detections this frame
    assert zone.occupancy() == {2: 1}
    assert zone.end_track(3) == (None, ZoneChange(3, 2, 0.0, 0.0), 0.0) and zone.occupancy() == {}


def inside_and_outside(track: int):
    """One track's box with its foot inside the zone `box` (100 px square), and outside."""
    return make_detections([box_at(50, 50)], tracker_id=[track]), make_detections([box_at(150, 50)], tracker_id=[track])


def test_a_zone_keeps_each_tracks_dwell_over_its_stays():
    zone = ZoneMonitor("box", np.array([[0, 0], [100, 0], [100, 100], [0, 100]], np.float64))
    inside, outside = inside_and_outside(4)
    zone.update(inside, 1000.0)
    assert zone.loiterers(2500.0, 2000.0) == []
    assert zone.update(outside, 2500.0) == ([], [ZoneChange(4, 0, 2500.0, 1500.0)])  # the first stay: 1.5 s
    zone.update(inside, 4000.0)
    assert zone.loiterers(6000.0, 2000.0) == [(4, 0, 2000.0)]  # this stay reached 2 s
    assert zone.loiterers(7000.0, 2000.0) == []  # said once per stay
    assert zone.loiterers(7000.0, 2000.0, np.array([1])) == []
    # it ends inside: 1.5 s + 3 s
    assert zone.end_track(4, 7000.0) == (None, ZoneChange(4, 0, 7000.0, 3000.0), 4500.0)


def test_with_inertia_a_foot_out_for_fewer_frames_is_one_stay_dated_from_its_first_frames():
    zone = ZoneMonitor("box", np.array([[0, 0], [100, 0], [100, 100], [0, 100]], np.float64), inertia=3)
    inside, outside = inside_and_outside(4)
    assert zone.update(outside, 0.0) == ([], [])
    assert zone.update(inside, 100.0) == ([], []) and zone.update(inside, 200.0) == ([], [])
    assert zone.update(inside, 300.0) == ([ZoneChange(4, 0, 100.0)], [])  # counted on its third frame in
    for t in (400.0, 500.0):  # out for two frames: the same stay
        assert zone.update(outside, t) == ([], [])
    assert zone.loiterers(500.0, 300.0) == []  # not while it may have left
    zone.update(inside, 600.0)
    assert zone.loiterers(600.0, 300.0) == [(4, 0, 500.0)]
    assert [zone.update(outside, t) for t in (700.0, 800.0, 900.0)] == [([], []), ([], []),
                                                                        ([], [ZoneChange(4, 0, 700.0, 600.0)])]
    assert zone.num_entered == 1


def test_a_track_that_ends_while_crossing_counts_what_it_was_last_seen_doing():
    zone = ZoneMonitor("box", np.array([[0, 0], [100, 0], [100, 100], [0, 100]], np.float64), inertia=3)
    inside, outside = inside_and_outside(4)
    zone.update(outside, 0.0)
    zone.update(inside, 100.0)  # in for one frame, then lost: it entered, and left when last seen
    assert zone.end_track(4, 100.0) == (ZoneChange(4, 0, 100.0), ZoneChange(4, 0, 100.0, 0.0), 0.0)
    assert zone.num_entered == 1 and zone.occupancy() == {}
    for t in (0.0, 100.0, 200.0):
        zone.update(inside, t)
    zone.update(outside, 300.0)
    zone.update(outside, 400.0)  # out for two frames, then lost: it left on the first
    assert zone.end_track(4, 400.0) == (None, ZoneChange(4, 0, 300.0, 300.0), 300.0)


@pytest.mark.parametrize("point, inside", [((5, 5), True), ((15, 5), False), ((9.9, 9.9), True), ((-1, 5), False)])
def test_in_polygon(point, inside):
    square = np.array([[0, 0], [10, 0], [10, 10], [0, 10]], np.float64)
    assert in_polygon(square, np.array([point], np.float64))[0] == inside
