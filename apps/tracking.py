"""Multi-object tracking behind one verb, `update`: OC-SORT (`apps/ocsort.py`, the
algorithm of Roboflow's `trackers` with every filter in one array) or ByteTrack from
`trackers`, chosen per app (`tracker.kind` in its spec).

Tracking is class-agnostic; a track's class is the majority vote of the classes its
detections had, which steadies a detector that wavers between classes. Such a
detector also gives one object two boxes at once, one per class (its non-maximum
suppression is class by class: a van is a truck and a bus on one frame), and two boxes
make two tracks. So boxes of classes in one of the spec's `class_groups` (COCO's
car, truck and bus) that overlap by `DUPLICATE_IOU` are one object: the strongest box
goes to the tracker and votes for its class, the others are dropped. Each frame goes
to the tracker with its stream time, so a lost track is kept `lost_track_s` of stream
time whatever the app's sampled rate and however many frames were skipped or dropped.

OC-SORT is the default: on the street clips its line counts come closer to the ground
truth than ByteTrack's. Both confirm a track on its `min_hits`-th detection in a row.
OC-SORT, as in its paper, also confirms at once every track matched in the first
`min_hits` frames it is given (two at least), and after a missed frame shows a track
again only on its (`min_hits` - 1)-th detection in a row (at once below 3); ByteTrack
shows it at once. With `appearance` OC-SORT also matches by colour, so it needs each
box's colour (`apps/appearance.py`), and the frame's size, to tell which boxes the
border may cut.

Both trackers answer with (detection index, track id) pairs; only ByteTrack's adapter
sees supervision's `Detections`, and the arrays pass through as they are (no copies).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
import supervision as sv
from trackers import ByteTrackTracker

from apps.appearance import looks
from apps.ocsort import OCSort
from apps.spec import TrackerOptions
from core.detections import Detections

# two boxes of one class group overlapping this much are one object seen as two classes;
# two objects side by side (parked cars, a bus behind a car) overlap less than this
DUPLICATE_IOU = 0.7


def one_box_per_object(detections: Detections, group_of: np.ndarray) -> np.ndarray:
    """[N] bool: the boxes to keep, the strongest of each set of boxes of one class
    group that overlap by DUPLICATE_IOU or more, greedily by confidence as NMS does.
    `group_of` [num_labels]: each class id's group, -1 for a class in none (never merged)."""
    n = len(detections)
    keep = np.ones(n, bool)
    if n < 2:
        return keep
    cid = detections.class_id
    known = (cid >= 0) & (cid < len(group_of))
    group = np.where(known, group_of[np.where(known, cid, 0)] if len(group_of) else -1, -1)  # [N]
    xyxy = detections.xyxy.astype(np.float64)
    area = (xyxy[:, 2] - xyxy[:, 0]) * (xyxy[:, 3] - xyxy[:, 1])
    for i in np.argsort(-detections.confidence, kind="stable"):
        if not keep[i] or group[i] < 0:
            continue
        rivals = np.flatnonzero(keep & (group == group[i]))
        rivals = rivals[rivals != i]
        if not len(rivals):
            continue
        w = np.clip(np.minimum(xyxy[rivals, 2], xyxy[i, 2]) - np.maximum(xyxy[rivals, 0], xyxy[i, 0]), 0, None)
        h = np.clip(np.minimum(xyxy[rivals, 3], xyxy[i, 3]) - np.maximum(xyxy[rivals, 1], xyxy[i, 1]), 0, None)
        inter = w * h
        iou = inter / np.maximum(area[rivals] + area[i] - inter, 1e-9)
        keep[rivals[iou >= DUPLICATE_IOU]] = False
    return keep


class _ByteTrack:
    """Roboflow's ByteTrack with OCSort's verbs."""

    def __init__(self, **options) -> None:
        self._tracker = ByteTrackTracker(**options)

    def update(self, xyxy: np.ndarray, confidence: np.ndarray, t_s: float) -> tuple[np.ndarray, np.ndarray]:
        given = sv.Detections(xyxy=xyxy, confidence=confidence, data={"index": np.arange(len(xyxy))})
        out = self._tracker.update(given, timestamp=t_s)
        return np.asarray(out.data.get("index", ()), np.int64), np.asarray(out.tracker_id, np.int64)

    def forget(self, track_id: int) -> None:
        self._tracker.tracks = [t for t in self._tracker.tracks if t.tracker_id != track_id]


def _build(options: TrackerOptions, fps: float) -> OCSort | _ByteTrack:
    # both count their lost-track buffer in frames at 30 fps: lost_track_buffer / 30
    # seconds when they are given timestamps, as here.
    common = dict(lost_track_buffer=max(1, round(options.lost_track_s * 30)), frame_rate=fps,
                  minimum_iou_threshold=options.match_iou, high_conf_det_threshold=options.activation_confidence)
    if options.kind == "ocsort":
        colour = {"appearance_gate": options.appearance.gate, "appearance_weight": options.appearance.weight} \
            if options.appearance is not None else {}
        # OC-SORT's reference counts the matches after the detection that began a track,
        # ByteTrack's the detections: both confirm a track on its min_hits-th detection
        # in a row (its second at the earliest) when OC-SORT is given one fewer
        return OCSort(**common, **colour, minimum_consecutive_frames=max(1, options.min_hits - 1),
                      height_iou=options.height_iou)
    # one confidence both starts a track and makes a detection "high" in ByteTrack's
    # first association; the app's min_confidence drops the rest before they get here
    return _ByteTrack(track_activation_threshold=options.activation_confidence,
                      minimum_consecutive_frames=options.min_hits, **common)


def group_of_class(groups: list[list[str]], labels: tuple[str, ...]) -> np.ndarray:
    """[len(labels)] each class id's group, -1 for a class in none; groups that share a
    class are one. A name that is not a label is left out (the spec's check names it)."""
    group_of = np.full(len(labels), -1, np.int64)
    for k, group in enumerate(groups):
        ids = [labels.index(c) for c in group if c in labels]
        group_of[np.isin(group_of, group_of[ids][group_of[ids] >= 0])] = k  # an earlier group sharing one joins
        group_of[ids] = k
    return group_of


def first_of_group(group_of: np.ndarray | None, num_labels: int) -> np.ndarray:
    """[num_labels] each class id's group's first class id (its own, in no group): the
    class an object of that class is the same object back as (apps/stationary.py)."""
    first = np.arange(num_labels, dtype=np.int64)
    if group_of is not None:
        for g in set(group_of[group_of >= 0].tolist()):
            members = np.flatnonzero(group_of == g)
            first[members] = members[0]
    return first


class Tracker:
    def __init__(self, options: TrackerOptions, fps: float, frame_size: tuple[int, int] | None = None,
                 labels: tuple[str, ...] = ()) -> None:
        """`frame_size` (width, height): with it, matching by colour learns nothing from
        boxes the frame's border may cut and trusts their colour less; a track begun
        from one has no colour until a clear box (`apps/appearance.py`). `labels`: the
        detector's class names, which `options.class_groups` name."""
        if fps <= 0:
            raise ValueError(f"fps must be > 0; was {fps}")
        self._tracker = _build(options, fps)
        self.frame_size = frame_size
        self.by_colour = options.appearance is not None
        self.group_of = group_of_class(options.class_groups, labels) if options.class_groups else None
        self._votes: dict[int, Counter] = {}

    def update(self, detections: Detections, t_ms: float, colour: np.ndarray | None = None) -> Detections:
        """Returns the detections that belong to confirmed tracks, with `tracker_id` set
        and `class_id` replaced by each track's majority class. `t_ms`: the frame's
        stream time, rising from call to call; `colour`: each box's (`colours`), needed
        when the tracker matches by colour."""
        if self.group_of is not None:
            keep = one_box_per_object(detections, self.group_of)
            if not keep.all():
                detections = detections[keep]
                colour = colour[keep] if colour is not None and len(colour) == len(keep) else colour
        if self.by_colour:
            if colour is None or len(colour) != len(detections):
                raise ValueError(f"tracker.appearance matches by colour: update needs a colour for each of the "
                                 f"{len(detections)} boxes; was {None if colour is None else len(colour)}")
            index, tracker_id = self._tracker.update(detections.xyxy, detections.confidence, t_ms / 1000.0,
                                                     looks(colour, detections.xyxy, self.frame_size))
        else:
            index, tracker_id = self._tracker.update(detections.xyxy, detections.confidence, t_ms / 1000.0)
        confirmed = tracker_id >= 0
        if not confirmed.any():
            return Detections.empty()
        index, tracker_id = index[confirmed], tracker_id[confirmed]
        for tid, cid in zip(tracker_id.tolist(), detections.class_id[index].tolist()):
            self._votes.setdefault(tid, Counter())[cid] += 1
        voted = np.array([self.track_class(t) for t in tracker_id.tolist()], np.int64)
        return replace(detections[index], class_id=voted, tracker_id=tracker_id)  # `data` goes with its boxes

    def track_class(self, track_id: int) -> int:
        return self._votes[track_id].most_common(1)[0][0]

    def forget(self, track_id: int) -> None:
        """The app ended this track: it must not come back under the same id, even when
        the tracker's own lost-track budget (rounded to its 30 fps frames) is longer."""
        self._votes.pop(track_id, None)
        self._tracker.forget(track_id)
