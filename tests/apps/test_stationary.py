"""Stationary objects (apps/stationary.py): a parked car whose detections drop out now
and then is one track, not one per return, and a box that jitters on a line while it
stands there is not counted again and again."""

import numpy as np

from apps.app import App
from apps.spec import parse_spec
from apps.stationary import StationaryKeeper, iou
from factories import box_at, make_block, make_detections

LABELS = ("person", "car", "bike")
FPS = 10.0


def make_app(**overrides) -> App:
    spec = parse_spec({"name": "t", "detector": "scenedet", "classes": ["car"],
                       "lines": {"kerb": [[0.5, 1.0], [0.5, 0.0]]},
                       "tracker": {"min_hits": 2, "lost_track_s": 0.5}, **overrides})
    return App(spec, "cam", (200, 100), FPS, LABELS)


def run(app: App, boxes: list[list[float] | None]) -> list:
    """One car box per frame (None: not detected on that frame)."""
    block = make_block(num_frames=len(boxes), fps=FPS, size=(200, 100))
    events = []
    for i, box in enumerate(boxes):
        dets = make_detections([box] if box else [], [1] if box else [])
        e, _ = app.observe(block.select(np.arange(len(boxes)) == i), [dets])
        events += e
    return events + app.finish()


def parked_with_dropouts() -> list:
    """A car parked at (60, 50) for 30 s; its detections drop out for 2 s (longer than
    the tracker keeps a lost track) every 6 s, and its box wobbles by a pixel."""
    rng = np.random.default_rng(1)
    return [None if (i // 10) % 6 in (4, 5) else box_at(60 + rng.uniform(-1, 1), 50, 30, 16) for i in range(300)]


def test_a_parked_car_whose_detections_drop_out_is_one_track():
    boxes = parked_with_dropouts()
    plain = [e.type for e in run(make_app(), boxes)]
    assert plain.count("track_start") >= 4  # without it: a new car at every return
    kept = run(make_app(stationary_s=2.0), boxes)
    assert [e.type for e in kept].count("track_start") == 1
    assert [e.type for e in kept].count("track_end") == 1 and kept[-1].type == "track_end"
    assert kept[-1].data["duration_ms"] >= 27_000  # one stay, from its first frames to its last


def test_a_car_standing_on_a_line_crosses_it_once():
    """It drives onto the kerb line and stops there, its box jittering across the line."""
    rng = np.random.default_rng(2)
    drive = [box_at(40 + 5 * i, 50, 30, 16) for i in range(12)]  # reaches x = 95..100
    stand = [box_at(100 + rng.uniform(-3, 3), 50, 30, 16) for _ in range(200)]
    settled_ms = 6000.0  # it stopped at 1.2 s; stationary_s later, and a spell or two of settling
    plain = [e for e in run(make_app(), drive + stand) if e.type == "line_cross"]
    assert len([e for e in plain if e.t_ms > settled_ms]) >= 5  # the jitter counts it again and again
    kept = [e for e in run(make_app(stationary_s=2.0), drive + stand) if e.type == "line_cross"]
    assert kept and kept[0].data["direction"] == "in"
    assert all(e.t_ms <= settled_ms for e in kept), [e.t_ms for e in kept]  # none once it stands


def test_a_car_that_drives_off_is_no_longer_stationary_and_a_new_car_there_is_new():
    keeper = StationaryKeeper(stationary_s=1.0, park_s=60.0)
    box = [10.0, 10.0, 40.0, 26.0]
    for t in range(0, 1500, 100):
        keeper.seen(1, box, float(t))
    assert keeper.stationary(1, 1400.0)
    assert keeper.park(1, box, 1, 1400.0)
    assert keeper.returning(7, [60.0, 10.0, 90.0, 26.0], 1) is None  # elsewhere: another car
    assert keeper.returning(8, box, 2) is None  # a bike where the car stood is not the car
    assert keeper.returning(9, [11.0, 10.0, 41.0, 26.0], 1) == 1 and keeper.alias == {9: 1}
    keeper.seen(1, [80.0, 10.0, 110.0, 26.0], 1500.0)  # it drives off
    assert not keeper.stationary(1, 1600.0)
    assert keeper.forget(1) == [9] and not keeper.alias
    assert iou(box, box) == 1.0 and iou(box, [100.0, 100.0, 110.0, 110.0]) == 0.0


def test_stationary_s_changes_while_running():
    """PATCHed on (and off) a running app: the parked car is one track once it is on,
    and when it is off again nothing stays parked."""
    boxes = parked_with_dropouts()
    app = make_app()
    block = make_block(num_frames=len(boxes), fps=FPS, size=(200, 100))
    starts = []

    def feed(frames: range) -> None:
        for i in frames:
            dets = make_detections([boxes[i]] if boxes[i] else [], [1] if boxes[i] else [])
            events, _ = app.observe(block.select(np.arange(len(boxes)) == i), [dets])
            starts.extend(e for e in events if e.type == "track_start")

    app.reconfigure(parse_spec({**app.spec.model_dump(mode="json"), "stationary_s": 2.0}))
    feed(range(0, 150))
    assert len(starts) == 1 and app.keeper.alias  # parked through its drop-outs, and back as itself
    app.reconfigure(parse_spec({**app.spec.model_dump(mode="json"), "stationary_s": None}))
    assert not app.keeper.parked and not app.keeper.alias and app.keeper.stationary_s is None
    feed(range(150, 300))
    assert len(starts) >= 2  # without it again: a new car at a return


def test_a_parked_car_unseen_when_the_stream_ends_stays_in_its_zone_to_the_end():
    # its detections drop out for the stream's last 2 s (frames 280-299); parked, it is
    # still there, as its zone's occupancy counts it, so its stay runs to the last frame
    app = make_app(stationary_s=2.0, zones={"bay": [[0, 0], [0.5, 0], [0.5, 1], [0, 1]]})
    events = run(app, parked_with_dropouts())
    exits = [e for e in events if e.type == "zone_exit"]
    assert [(e.data["left_ms"], e.data["dwell_ms"]) for e in exits] == [(29_900.0, 29_800.0)]


def test_a_parked_vehicle_that_comes_back_as_another_class_of_its_group_is_the_same_track():
    """The van is a truck until its detections drop out, and a bus when they come back:
    with car, truck and bus in one class group it is the van back, not a new vehicle."""
    labels = ("person", "car", "truck", "bus")
    van = box_at(60, 50, 30, 16)

    def starts(class_groups: list) -> int:
        spec = parse_spec({"name": "t", "detector": "coco", "classes": ["car", "truck", "bus"], "stationary_s": 2.0,
                           "tracker": {"min_hits": 2, "lost_track_s": 0.5, "class_groups": class_groups}})
        app = App(spec, "cam", (200, 100), FPS, labels)
        block = make_block(num_frames=80, fps=FPS, size=(200, 100))
        events = []
        for i in range(80):  # a truck for 4 s, nothing for 2 s, a bus for 2 s
            seen = [] if 40 <= i < 60 else [van]
            dets = make_detections(seen, [2 if i < 40 else 3] * len(seen))
            events += app.observe(block.select(np.arange(80) == i), [dets])[0]
        return [e.type for e in events + app.finish()].count("track_start")

    assert starts([]) == 2
    assert starts([["car", "truck", "bus"]]) == 1
