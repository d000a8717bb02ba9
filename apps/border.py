"""The frame's border, where a box may be only the part of its object in view: which
borders a box touches, whether a track is going out across one (so it has left the
view, apps/app.py), and the box as if the border did not cut it (`whole_box`), whose
foot point is where its object stands."""

from __future__ import annotations


# a box this close to the frame's border (of its width or height) touches it; matching by
# colour has its own margin for boxes it may cut (apps/appearance.py EDGE_PX, a few pixels),
# chosen for what it costs the tracker, not for where a box stands
EDGE_SHARE = 0.01


def touching(box: list[float], frame_size: tuple[int, int]) -> tuple[bool, bool, bool, bool]:
    """Whether `box` (xyxy) touches the left, top, right and bottom borders."""
    width, height = frame_size
    mx, my = EDGE_SHARE * width, EDGE_SHARE * height
    return box[0] <= mx, box[1] <= my, box[2] >= width - mx, box[3] >= height - my


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


def learn_size(size: list[float | None], box: list[float], frame_size: tuple[int, int]) -> None:
    """Fold `box` into a track's `size` (width, height), on each axis only where the
    box touches neither border: a box the border cuts is not the object's size."""
    left, top, right, bottom = touching(box, frame_size)
    for axis, cut in ((0, left or right), (1, top or bottom)):
        if not cut:
            seen = box[axis + 2] - box[axis]
            size[axis] = seen if size[axis] is None else size[axis] + SIZE_WEIGHT * (seen - size[axis])


def whole_box(box: list[float], size: list[float | None], frame_size: tuple[int, int]) -> list[float]:
    """`box` (xyxy) as if the border did not cut it: where it touches a border, it is
    widened past it to the track's `size`, learned while it was clear. Its foot point is
    then where the object stands, as the renderer's truth takes it: a walker leaving by
    the side is out of a zone once half of them is, not when the last sliver is gone."""
    left, top, right, bottom = touching(box, frame_size)
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
