"""An app's false-positive controls, applied to each frame's detections before tracking:
per-class size, shape and score (`filters`), and object masks (`masks`).

Built once per spec and frame size: the per-class bounds become arrays indexed by class
id, and each mask a polygon in pixels with the class ids it hides, so a frame costs a
few vector operations.
"""

from __future__ import annotations

import numpy as np

from apps.geometry import in_polygon
from apps.spec import EVERY_CLASS, AppSpec, ClassFilter
from core.detections import Detections


class DetectionFilter:
    def __init__(self, spec: AppSpec, labels: tuple[str, ...], frame_size: tuple[int, int]) -> None:
        n = len(labels)
        width, height = frame_size
        default = spec.filters.get(EVERY_CLASS, ClassFilter())
        rules = [spec.filters.get(label, default) for label in labels]
        frame_area = float(width * height)
        self._min_area = np.array([r.min_area * frame_area for r in rules], np.float64)
        self._max_area = np.array([r.max_area * frame_area for r in rules], np.float64)
        self._min_ratio = np.array([r.min_ratio for r in rules], np.float64)
        self._max_ratio = np.array([r.max_ratio for r in rules], np.float64)
        self._min_score = np.array([spec.min_confidence if r.min_score is None else r.min_score for r in rules],
                                   np.float64)
        scale = np.array(frame_size, np.float64)
        self._masks = [(np.array(m.polygon, np.float64) * scale,
                        np.arange(n) if m.classes is None else np.array([labels.index(c) for c in m.classes]))
                       for m in spec.masks]
        self._min_confidence = spec.min_confidence
        self._trivial = not spec.filters and not spec.masks

    def keep(self, dets: Detections) -> np.ndarray:
        """(N,) bool: the detections that count. Those of ids past the labels (a model's
        extra outputs) are judged by the app's min_confidence alone."""
        if self._trivial or len(dets) == 0:
            return dets.confidence >= self._min_confidence
        cid = dets.class_id
        known = cid < len(self._min_score)
        c = np.where(known, cid, 0)
        w = (dets.xyxy[:, 2] - dets.xyxy[:, 0]).astype(np.float64)
        h = (dets.xyxy[:, 3] - dets.xyxy[:, 1]).astype(np.float64)
        area = w * h
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(h > 0, w / np.where(h > 0, h, 1.0), np.inf)
        passes = ((dets.confidence >= self._min_score[c]) & (area >= self._min_area[c]) & (area <= self._max_area[c])
                  & (ratio >= self._min_ratio[c]) & (ratio <= self._max_ratio[c]))
        keep = np.where(known, passes, dets.confidence >= self._min_confidence)
        if self._masks:
            foot = np.stack([(dets.xyxy[:, 0] + dets.xyxy[:, 2]) / 2, dets.xyxy[:, 3]], axis=1).astype(np.float64)
            for polygon, hidden in self._masks:
                keep &= ~(in_polygon(polygon, foot) & np.isin(cid, hidden))
        return keep
