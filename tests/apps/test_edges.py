"""A track that goes out across the frame's border has left the view: whoever comes in
there next is someone else, however soon they come."""

from __future__ import annotations

import numpy as np

from apps.app import leaving_view
from factories import make_block, make_detections
from test_app import feed, make_app


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
