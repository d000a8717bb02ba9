"""Line-crossing counts and zone occupancy over tracked detections.

A track crosses a line when its box centre moves from one side to the other, where it
passes within the segment's ends. A dead band of `margin_px` either side of the line
ignores jitter: the side only changes once the centre is clearly across, so a box
wobbling on the line is counted once, not many times. Zones contain a track when its
bottom centre (foot point) is inside.

A zone also keeps time: when each track inside entered (the stream time of the first
frame it was seen inside), and its dwell, summed over its stays, until the track ends.
A stay ends at the first frame the track is seen outside, or at the last frame it was
seen at all when it ends inside.

A detector's box jitters, and with it the foot point of a person standing on a zone's
border. `inertia` (as in Frigate) is how many frames in a row a track must be seen on
the other side before it counts as entered or left; the change is then dated to the
first of them, so a stay's dwell is the same whatever the inertia, and a foot that
steps out for a frame does not split one stay into two.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from apps.geometry import along_line, in_polygon, side_of_line
from core.detections import Detections


@dataclass
class DirectionCounts:
    num_in: int = 0
    num_out: int = 0

    def add(self, direction: str) -> None:
        if direction == "in":
            self.num_in += 1
        else:
            self.num_out += 1

    def to_dict(self) -> dict[str, int]:
        return {"in": self.num_in, "out": self.num_out}


@dataclass(frozen=True)
class Crossing:
    track_id: int
    class_id: int
    direction: str  # "in" | "out"


@dataclass
class LineCounter:
    name: str
    a: np.ndarray  # [2] pixels
    b: np.ndarray  # [2] pixels
    margin_px: float = 2.0
    total: DirectionCounts = field(default_factory=DirectionCounts)
    by_class: dict[int, DirectionCounts] = field(default_factory=dict)
    _last: dict[int, tuple[bool, np.ndarray]] = field(default_factory=dict)  # track -> (on "in" side, anchor)

    def update(self, tracked: Detections) -> list[Crossing]:
        if len(tracked) == 0:
            return []
        anchors = tracked.centers
        sides = side_of_line(self.a, self.b, anchors)
        crossings = []
        for tid, cid, p, s in zip(tracked.tracker_id, tracked.class_id, anchors, sides):
            tid = int(tid)
            if abs(s) < self.margin_px:
                continue  # in the dead band: keep the last clear side
            on_in_side = bool(s > 0)
            last = self._last.get(tid)
            self._last[tid] = (on_in_side, p)
            if last is None or last[0] == on_in_side or not self._passes_segment(last[1], p):
                continue
            direction = "in" if on_in_side else "out"
            self.total.add(direction)
            self.by_class.setdefault(int(cid), DirectionCounts()).add(direction)
            crossings.append(Crossing(tid, int(cid), direction))
        return crossings

    def _passes_segment(self, p: np.ndarray, q: np.ndarray) -> bool:
        sp, sq = side_of_line(self.a, self.b, np.stack([p, q]))
        t = sp / (sp - sq)
        hit = p + t * (q - p)
        u = along_line(self.a, self.b, hit[None])[0]
        return 0.0 <= u <= 1.0

    def forget(self, track_id: int) -> None:
        self._last.pop(track_id, None)


@dataclass(frozen=True)
class ZoneChange:
    """A track that entered or left a zone: `at_ms` is the first frame it was seen on
    the new side; a leaving one has the stay's `dwell_ms` too."""
    track_id: int
    class_id: int
    at_ms: float
    dwell_ms: float = 0.0


@dataclass
class _Pending:
    class_id: int
    first_ms: float  # the first frame, in a row, the track was seen on the other side
    frames: int = 0


@dataclass
class ZoneMonitor:
    name: str
    polygon: np.ndarray  # [K, 2] pixels
    inertia: int = 1  # frames in a row on the other side before a track counts as in or out
    inside: dict[int, int] = field(default_factory=dict)  # track -> class, currently inside
    num_entered: int = 0
    since_ms: dict[int, float] = field(default_factory=dict)  # track inside -> when it entered
    dwelt_ms: dict[int, float] = field(default_factory=dict)  # track -> its finished stays, summed
    loitered: set[int] = field(default_factory=set)  # tracks whose zone_dwell was said, this stay
    pending: dict[int, _Pending] = field(default_factory=dict)  # tracks seen across, not yet `inertia` frames

    def update(self, tracked: Detections, t_ms: float = 0.0) -> tuple[list[ZoneChange], list[ZoneChange]]:
        """Returns (entered, exited): the tracks whose change counted on this frame. A
        track absent from this frame keeps its state: it may only be occluded."""
        entered: list[ZoneChange] = []
        exited: list[ZoneChange] = []
        if len(tracked) == 0:
            return entered, exited
        now_in = in_polygon(self.polygon, tracked.bottom_centers)
        for tid, cid, is_in in zip(tracked.tracker_id, tracked.class_id, now_in):
            tid, cid = int(tid), int(cid)
            if bool(is_in) == (tid in self.inside):
                self.pending.pop(tid, None)
                continue
            pending = self.pending.setdefault(tid, _Pending(cid, t_ms))
            pending.frames += 1
            if pending.frames < self.inertia:
                continue
            del self.pending[tid]
            if is_in:
                entered.append(self._enter(tid, cid, pending.first_ms))
            else:
                del self.inside[tid]
                exited.append(self._leave(tid, cid, pending.first_ms))
        return entered, exited

    def _enter(self, track_id: int, class_id: int, t_ms: float) -> ZoneChange:
        self.inside[track_id], self.since_ms[track_id] = class_id, t_ms
        self.num_entered += 1
        return ZoneChange(track_id, class_id, t_ms)

    def _leave(self, track_id: int, class_id: int, t_ms: float) -> ZoneChange:
        entered_ms = self.since_ms.pop(track_id, t_ms)
        stay = max(0.0, t_ms - entered_ms)
        self.dwelt_ms[track_id] = self.dwelt_ms.get(track_id, 0.0) + stay
        self.loitered.discard(track_id)
        return ZoneChange(track_id, class_id, t_ms, stay)

    def loiterers(self, t_ms: float, loiter_ms: float, classes: np.ndarray | None = None) -> list[tuple[int, int, float]]:
        """(track_id, class_id, dwell ms) of the tracks inside whose stay has just reached
        `loiter_ms` (of `classes`, or any): each once per stay. One seen stepping out waits
        until it is back in: its stay may have ended before `loiter_ms`."""
        out = []
        for tid, cid in self.inside.items():
            stay = t_ms - self.since_ms.get(tid, t_ms)
            if stay >= loiter_ms and tid not in self.loitered and tid not in self.pending \
                    and (classes is None or cid in classes):
                self.loitered.add(tid)
                out.append((tid, cid, stay))
        return out

    def end_track(self, track_id: int, t_ms: float = 0.0) -> tuple[ZoneChange | None, ZoneChange | None, float]:
        """Forget a finished track, taken as there until `t_ms` (when it was last seen,
        or the app's last frame): (its entry, if it was coming in; its exit, if it was
        inside; its whole dwell in the zone in ms, the stay now ended included). Its last
        frames are all there is to go on, so a change seen on fewer than `inertia` of
        them counts: one coming in entered on the first of them, one going out left
        then."""
        pending = self.pending.pop(track_id, None)
        entered = None
        if pending is not None and track_id not in self.inside:
            entered, pending = self._enter(track_id, pending.class_id, pending.first_ms), None
        cid = self.inside.pop(track_id, None)
        left = None if cid is None else self._leave(track_id, cid, t_ms if pending is None else pending.first_ms)
        return entered, left, self.dwelt_ms.pop(track_id, 0.0)

    def occupancy(self) -> dict[int, int]:
        counts: dict[int, int] = {}
        for cid in self.inside.values():
            counts[cid] = counts.get(cid, 0) + 1
        return counts
