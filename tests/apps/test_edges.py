"""A track that goes out across the frame's border has left the view: whoever comes in
there next is someone else, however soon they come."""

from __future__ import annotations

from apps.app import leaving_view
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
