"""Stationary objects: the parked car whose box flickers.

A track whose box has overlapped where its still spell began (IoU >= `STILL_IOU`) for
`stationary_s` is stationary. A stationary track crosses no line: a box that jitters
on a line would count the car again and again. When a stationary track is lost, as a
parked car is when its detections drop out for a while, it is parked rather than
ended; a new track that starts on a parked box (same class, IoU >= `PARK_IOU`) is the
same object back, so it goes on under the parked track's id and starts nothing new.
A parked track that does not come back within `park_s` (`PARKED_FOR` times
`stationary_s`, at most a day) ends then.

Pure bookkeeping on the app's track ids; the app (apps/app.py) maps the tracker's ids
to its own with `app_ids`.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, field

import numpy as np

STILL_IOU = 0.6  # a box that overlaps its spell's first box this much has not moved (a 10% wobble)
PARK_IOU = 0.5  # a new track this close to a parked box is that object back
PARKED_FOR = 60.0  # a parked track ends after this many times `stationary_s` without coming back
MAX_PARKED_S = 86_400.0


def parked_for_s(stationary_s: float | None) -> float:
    return 0.0 if stationary_s is None else min(MAX_PARKED_S, PARKED_FOR * stationary_s)


def iou(a: list[float], b: list[float]) -> float:
    x0, y0 = max(a[0], b[0]), max(a[1], b[1])
    x1, y1 = min(a[2], b[2]), min(a[3], b[3])
    inter = max(0.0, x1 - x0) * max(0.0, y1 - y0)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


@dataclass
class Parked:
    box: list[float]
    class_id: int
    since_ms: float  # when it was last seen


@dataclass
class StationaryKeeper:
    stationary_s: float | None  # None: nothing is ever stationary
    park_s: float
    still: dict[int, tuple[list[float], float]] = field(default_factory=dict)  # track -> (spell's box, since)
    parked: dict[int, Parked] = field(default_factory=dict)
    alias: dict[int, int] = field(default_factory=dict)  # tracker's id -> the parked track it came back as

    def seen(self, track_id: int, box: list[float], t_ms: float) -> None:
        spell = self.still.get(track_id)
        if spell is None or iou(spell[0], box) < STILL_IOU:
            self.still[track_id] = (box, t_ms)

    def stationary(self, track_id: int, t_ms: float) -> bool:
        spell = self.still.get(track_id)
        return self.stationary_s is not None and spell is not None and \
            t_ms - spell[1] >= self.stationary_s * 1000.0

    def park(self, track_id: int, box: list[float], class_id: int, last_ms: float) -> bool:
        """A lost track: parked when it was stationary (true), else it may end."""
        if not self.stationary(track_id, last_ms):
            return False
        self.parked[track_id] = Parked(box, class_id, last_ms)
        return True

    def returning(self, tracker_id: int, box: list[float], class_id: int) -> int | None:
        """A new track of the tracker's: the parked track it is, if any (then it is no
        longer parked, and the tracker's id maps to it from now on)."""
        best, best_iou = None, PARK_IOU
        for tid, p in self.parked.items():
            overlap = iou(p.box, box)
            if p.class_id == class_id and overlap >= best_iou:
                best, best_iou = tid, overlap
        if best is not None:
            del self.parked[best]
            self.alias[tracker_id] = best
        return best

    def app_ids(self, tracker_id: np.ndarray, class_id: np.ndarray, xyxy: np.ndarray,
                known: Container[int]) -> np.ndarray:
        """The app's ids [N] for the tracker's boxes (`tracker_id` [N], `class_id` [N],
        `xyxy` [N, 4]): an alias's parked track, or, for a track not `known` to the app,
        the parked track it is back as (see `returning`); else the tracker's own."""
        ids = tracker_id.copy()
        for k, (tid, cid, box) in enumerate(zip(tracker_id, class_id, xyxy)):
            tid = int(tid)
            if tid in self.alias:
                ids[k] = self.alias[tid]
            elif tid not in known:
                back = self.returning(tid, [float(v) for v in box], int(cid))
                ids[k] = tid if back is None else back
        return ids

    def forget(self, track_id: int) -> list[int]:
        """An ended track; returns the tracker's ids that were aliases of it."""
        self.still.pop(track_id, None)
        self.parked.pop(track_id, None)
        aliases = [t for t, a in self.alias.items() if a == track_id]
        for t in aliases:
            del self.alias[t]
        return aliases
