"""The frame's border (apps/border.py). A track that goes out across it has left the
view: whoever comes in there next is someone else, however soon they come. A box the
border cuts is made whole for lines and zones, so a walker leaving by the side leaves a
zone when half of them has."""

from __future__ import annotations

import numpy as np
import pytest
from test_app import feed, make_app
from test_dwell import SIZE, dwell_app

from apps.app import App
from apps.border import learned_size, leaving_view, touching, whole_box
from factories import box_at, make_block, make_detections


def test_someone_who_comes_in_where_another_went_out_gets_a_track_of_their_own():
    app = make_app(tracker={"min_hits": 2, "lost_track_s": 1.5})
    out = [[(40 - 6 * i, 50, 0)] for i in range(7)]  # x 40 -> 4: the box reaches the left border
    gap = [[] for _ in range(5)]  # half a second: well within lost_track_s
    back = [[(5 + 5 * i, 52, 0)] for i in range(8)]
    events = feed(app, out + gap + back + [[] for _ in range(20)])
    starts = [e for e in events if e.type == "track_start"]
    assert len(starts) == 2, [(e.type, e.track_id, e.t_ms) for e in events]
    first_end = next(e for e in events if e.type == "track_end")
    assert first_end.track_id == starts[0].track_id and first_end.t_ms == 600.0  # last seen on frame 6


def test_a_box_on_the_border_leaves_only_when_it_moves_out_across_it():
    size = (200, 100)
    assert leaving_view([5, 40, 15, 60], [-1, 40, 9, 60], size)  # left border, moving left
    assert not leaving_view([-1, 40, 9, 60], [1, 40, 11, 60], size)  # coming in
    assert not leaving_view([-1, 40, 9, 60], [-1, 40, 9, 60], size)  # standing on it
    assert leaving_view([180, 80, 190, 99], [181, 85, 191, 100], size)  # bottom, moving down
    assert not leaving_view([100, 40, 110, 60], [90, 40, 100, 60], size)  # inside the frame


def test_a_box_cut_by_the_border_leaves_even_when_its_last_step_goes_back_in():
    """A walker going out at the right border: the box is the part still inside, and on
    the last frame it widens (an arm swings back in), so from the frame before, its
    centre moved inward. From where it began to touch the border it moved out: it has
    left, and the one who comes in there a second later is someone else."""
    app = make_app(tracker={"min_hits": 2, "lost_track_s": 1.5})
    walking = [[150.0 + 8 * i, 40.0, 160.0 + 8 * i, 60.0] for i in range(5)]  # right edge 192
    out = [[190.0, 40.0, 200.0, 60.0], [194.0, 40.0, 200.0, 60.0], [191.0, 40.0, 200.0, 60.0]]
    back = [[196.0 - 6 * i, 42.0, 200.0, 62.0] for i in range(6)]
    frames = [[b] for b in walking + out] + [[] for _ in range(10)] + [[b] for b in back] + [[] for _ in range(20)]
    block = make_block(num_frames=len(frames), fps=10.0, size=(200, 100))
    events = []
    for i, boxes in enumerate(frames):
        events += app.observe(block.select(np.arange(len(frames)) == i), [make_detections(boxes)])[0]
    starts = [e for e in events if e.type == "track_start"]
    assert len(starts) == 2, [(e.type, e.track_id, e.t_ms) for e in events]
    first_end = next(e for e in events if e.type == "track_end")
    assert first_end.track_id == starts[0].track_id and first_end.t_ms == 700.0  # its last frame
    assert leaving_view(walking[-1], out[-1], (200, 100)) and not leaving_view(out[-2], out[-1], (200, 100))


def walk_out_left(app: App, width: float = 20.0):
    """A person `width` px wide walks left at 4 px a frame, from x=62 out across the left
    border; the boxes end at the border, as a detector's do, until 2 px are left."""
    events, k = [], 0
    while (centre := 62.0 - 4 * k) + width / 2 >= 2.0:
        box = box_at(centre, 50, w=width)
        box[0] = max(box[0], 0.0)
        e, _ = app.observe(make_block(num_frames=1, fps=10.0, start=k, size=SIZE), [make_detections([box])])
        events += e
        k += 1
    for j in range(k, k + 3):  # then it is gone
        events += app.observe(make_block(num_frames=1, fps=10.0, start=j, size=SIZE), [make_detections([])])[0]
    return events


def test_a_walker_leaving_by_the_side_is_out_of_the_zone_when_half_of_them_is():
    # `left` reaches the border, so the box cut by it always has its foot inside; the
    # track knows its width (20 px) from before, and its whole box is out once its
    # centre passes x=0: on frame 16 (62 - 4 * 16 = -2), where the box seen is [0, 50)
    # and it is seen two frames more, as a sliver
    events = walk_out_left(dwell_app())
    exit_ = next(e for e in events if e.type == "zone_exit")
    assert exit_.data["left_ms"] == pytest.approx(1600.0)
    assert [e.t_ms for e in events if e.type == "track_end"] == [pytest.approx(1700.0)]
    assert all(e.data["box"][0] >= 0 for e in events if "box" in e.data)  # events carry the box as seen


@pytest.mark.parametrize("box, size, whole", [
    ([0, 10, 8, 30], (20.0, 20.0), [-12, 10, 8, 30]),  # cut at the left: widened leftward to 20
    ([190, 10, 200, 30], (20.0, 20.0), [190, 10, 210, 30]),  # at the right
    ([50, 90, 60, 100], (10.0, 30.0), [50, 90, 60, 120]),  # at the bottom: the foot is below the frame
    ([0, 10, 8, 30], (None, 20.0), [0, 10, 8, 30]),  # no width learned yet: as it is
    ([0, 10, 25, 30], (20.0, 20.0), [0, 10, 25, 30]),  # wider than learned already
    ([0, 10, 200, 30], (20.0, 20.0), [0, 10, 200, 30]),  # at both sides: nothing to tell which is cut
    ([50, 0, 60, 12], (10.0, 30.0), [50, -18, 60, 12]),  # at the top: the foot stays where it is
    ([0, 90, 8, 100], (20.0, 30.0), [-12, 90, 8, 120]),  # in the bottom-left corner: both ways
])
def test_whole_box_widens_a_box_past_the_borders_it_touches(box, size, whole):
    box = [float(v) for v in box]
    assert whole_box(box, size, touching(box, SIZE)) == whole


def test_learned_size_learns_each_axis_only_from_boxes_the_border_does_not_cut():
    clear, cut_left = [50.0, 10.0, 70.0, 30.0], [0.0, 10.0, 5.0, 40.0]
    size = learned_size((None, None), clear, touching(clear, SIZE))
    assert size == (20.0, 20.0)
    # cut at the left: its height counts, not its width
    assert learned_size(size, cut_left, touching(cut_left, SIZE)) == (20.0, pytest.approx(22.0))
