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
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from apps.geometry import along_line, in_polygon, side_of_line
from engine.detections import Detections


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


@dataclass
class ZoneMonitor:
    name: str
    polygon: np.ndarray  # [K, 2] pixels
    inside: dict[int, int] = field(default_factory=dict)  # track -> class, currently inside
    num_entered: int = 0
    since_ms: dict[int, float] = field(default_factory=dict)  # track inside -> when it entered
    dwelt_ms: dict[int, float] = field(default_factory=dict)  # track -> its finished stays, summed
    loitered: set[int] = field(default_factory=set)  # tracks whose zone_dwell was said, this stay

    def update(self, tracked: Detections, t_ms: float = 0.0) -> tuple[list[tuple[int, int]],
                                                                      list[tuple[int, int, float]]]:
        """Returns (entered, exited) for this frame: (track_id, class_id) and, for those
        that left, (track_id, class_id, the stay's dwell in ms). A track absent from this
        frame keeps its state: it may only be occluded."""
        entered, exited = [], []
        if len(tracked) == 0:
            return entered, exited
        now_in = in_polygon(self.polygon, tracked.bottom_centers)
        for tid, cid, is_in in zip(tracked.tracker_id, tracked.class_id, now_in):
            tid, cid = int(tid), int(cid)
            if is_in and tid not in self.inside:
                self.inside[tid] = cid
                self.since_ms[tid] = t_ms
                self.num_entered += 1
                entered.append((tid, cid))
            elif not is_in and tid in self.inside:
                del self.inside[tid]
                exited.append((tid, cid, self._leave(tid, t_ms)))
        return entered, exited

    def _leave(self, track_id: int, t_ms: float) -> float:
        stay = max(0.0, t_ms - self.since_ms.pop(track_id, t_ms))
        self.dwelt_ms[track_id] = self.dwelt_ms.get(track_id, 0.0) + stay
        self.loitered.discard(track_id)
        return stay

    def loiterers(self, t_ms: float, loiter_ms: float, classes: np.ndarray | None = None) -> list[tuple[int, int, float]]:
        """(track_id, class_id, dwell ms) of the tracks inside whose stay has just reached
        `loiter_ms` (of `classes`, or any): each once per stay."""
        out = []
        for tid, cid in self.inside.items():
            stay = t_ms - self.since_ms.get(tid, t_ms)
            if stay >= loiter_ms and tid not in self.loitered and (classes is None or cid in classes):
                self.loitered.add(tid)
                out.append((tid, cid, stay))
        return out

    def end_track(self, track_id: int, t_ms: float = 0.0) -> tuple[int | None, float]:
        """Forget a finished track: (its class if it was inside, and so exits, else None;
        its whole dwell in the zone in ms, its stay now ended included)."""
        cid = self.inside.pop(track_id, None)
        if cid is not None:
            self._leave(track_id, t_ms)
        return cid, self.dwelt_ms.pop(track_id, 0.0)

    def occupancy(self) -> dict[int, int]:
        counts: dict[int, int] = {}
        for cid in self.inside.values():
            counts[cid] = counts.get(cid, 0) + 1
        return counts
