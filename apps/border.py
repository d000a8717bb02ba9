"""The frame's border, where a box may be only the part of its object in view: which
borders a box touches, whether a track is going out across one (so it has left the
view, apps/app.py), the box as if the border did not cut it (`whole_box`), whose foot
point is where its object stands, and which boxes the border may cut (`cut`), whose
colour the tracker does not learn (apps/appearance.py)."""

from __future__ import annotations

import numpy as np

# a box this close to the frame's border (of its width or height) touches it: where it
# stands and whether it is going out
EDGE_SHARE = 0.01
# a box this close to the frame's border may be cut by it, for matching by colour: a
# detector's box there falls a few pixels short of the border, so touching it is too
# strict a test, and a wider margin takes clear boxes for cut (`vigil eval tracking`)
EDGE_PX = 4.0

Borders = tuple[bool, bool, bool, bool]  # whether a box touches the left, top, right and bottom borders


def touching(box: list[float], frame_size: tuple[int, int]) -> Borders:
    """Which borders `box` (xyxy) touches."""
    width, height = frame_size
    mx, my = EDGE_SHARE * width, EDGE_SHARE * height
    return box[0] <= mx, box[1] <= my, box[2] >= width - mx, box[3] >= height - my


def cut(xyxy: np.ndarray, frame_size: tuple[int, int]) -> np.ndarray:
    """(N,) bool: boxes within EDGE_PX of a border of a frame of `frame_size` (width, height)."""
    b = np.asarray(xyxy, np.float64).reshape(-1, 4)
    w, h = frame_size
    return (b[:, 0] <= EDGE_PX) | (b[:, 1] <= EDGE_PX) | (b[:, 2] >= w - EDGE_PX) | (b[:, 3] >= h - EDGE_PX)


def leaving_view(since: list[float], now: list[float], frame_size: tuple[int, int]) -> bool:
    """A box (xyxy) that touches a border of the frame and whose centre moved toward it
    since `since`: the box it had when it began to touch that border (or the one before
    it, on its first frame there). One frame is not enough: a box cut by the border is
    the visible part of its object, and its centre jitters as a walker's arms swing."""
    left, top, right, bottom = touching(now, frame_size)
    dx = (now[0] + now[2] - since[0] - since[2]) / 2
    dy = (now[1] + now[3] - since[1] - since[3]) / 2
    return (left and dx < 0) or (right and dx > 0) or (top and dy < 0) or (bottom and dy > 0)


SIZE_WEIGHT = 0.2  # of each new box clear of the border in a track's size: a walker's width swings with a stride
Size = tuple[float | None, float | None]  # a track's (width, height), None on an axis not yet learned


def learned_size(size: Size, box: list[float], borders: Borders) -> Size:
    """A track's `size` with `box` (xyxy; `borders`, those it touches) folded in, on
    each axis only where the box touches neither border: a box the border cuts is not
    the object's size."""
    left, top, right, bottom = borders

    def axis(k: int, at_border: bool) -> float | None:
        if at_border:
            return size[k]
        seen = box[k + 2] - box[k]
        return seen if size[k] is None else size[k] + SIZE_WEIGHT * (seen - size[k])

    return axis(0, left or right), axis(1, top or bottom)


def whole_box(box: list[float], size: Size, borders: Borders) -> list[float]:
    """`box` (xyxy) as if the border did not cut it: where it touches a border
    (`borders`), it is widened past it to the track's `size`, learned while it was
    clear. Its foot point is then where the object stands, as the renderer's truth
    takes it: a walker leaving by the side is out of a zone once half of them is, not
    when the last sliver is gone."""
    left, top, right, bottom = borders
    whole = list(box)
    for axis, low, high in ((0, left, right), (1, top, bottom)):
        full = size[axis]
        if full is None or low == high or box[axis + 2] - box[axis] >= full:
            continue
        if low:
            whole[axis] = box[axis + 2] - full
        else:
            whole[axis + 2] = box[axis] + full
    return whole
