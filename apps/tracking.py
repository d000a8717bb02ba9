"""Multi-object tracking: ByteTrack from supervision behind one verb, `update`.

ByteTrack here is class-agnostic; a track's class is the majority vote of the classes
its detections had, which steadies a detector that wavers between classes.

supervision marks its ByteTrack deprecated in favour of the `trackers` package, which
requires the non-headless `opencv-python` and so cannot sit beside
`opencv-python-headless<5`; the pin `supervision<0.31` keeps it until that changes.
This module is the only place that knows.
"""

from __future__ import annotations

import warnings
from collections import Counter

import numpy as np
import supervision as sv

from apps.spec import TrackerOptions
from engine.detections import Detections


class Tracker:
    def __init__(self, options: TrackerOptions, fps: float) -> None:
        if fps <= 0:
            raise ValueError(f"fps must be > 0; was {fps}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            # supervision scales lost_track_buffer by fps / 30 internally.
            self._byte = sv.ByteTrack(
                track_activation_threshold=options.activation_confidence,
                lost_track_buffer=max(1, int(round(options.lost_track_s * 30))),
                minimum_matching_threshold=1.0 - options.match_iou,
                frame_rate=fps,
                minimum_consecutive_frames=options.min_hits,
            )
        self._votes: dict[int, Counter] = {}

    def update(self, detections: Detections) -> Detections:
        """Returns the detections that belong to confirmed tracks, with `tracker_id` set
        and `class_id` replaced by each track's majority class."""
        sv_in = sv.Detections(xyxy=detections.xyxy.astype(np.float32), confidence=detections.confidence,
                              class_id=detections.class_id)
        sv_out = self._byte.update_with_detections(sv_in)
        if len(sv_out) == 0:
            return Detections.empty()
        tracker_id = np.asarray(sv_out.tracker_id, np.int64)
        class_id = np.asarray(sv_out.class_id, np.int64)
        for tid, cid in zip(tracker_id, class_id):
            self._votes.setdefault(int(tid), Counter())[int(cid)] += 1
        voted = np.array([self.track_class(int(t)) for t in tracker_id], np.int64)
        return Detections(sv_out.xyxy, sv_out.confidence, voted, tracker_id)

    def track_class(self, track_id: int) -> int:
        return self._votes[track_id].most_common(1)[0][0]

    def forget(self, track_id: int) -> None:
        """The app ended this track: it must not come back under the same id. ByteTrack
        keeps a lost track for a number of *updates*, which can outlast the app's
        lost_track_s of stream time when frames are skipped or dropped."""
        self._votes.pop(track_id, None)
        self._byte.lost_tracks = [t for t in self._byte.lost_tracks if t.external_track_id != track_id]
