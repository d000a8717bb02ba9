"""Detection accuracy: mAP at an IoU threshold (VOC all-point AP) and recall per class."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def _intersection(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    x0 = np.maximum(a[:, None, 0], b[None, :, 0])
    y0 = np.maximum(a[:, None, 1], b[None, :, 1])
    x1 = np.minimum(a[:, None, 2], b[None, :, 2])
    y1 = np.minimum(a[:, None, 3], b[None, :, 3])
    return (x1 - x0).clip(0) * (y1 - y0).clip(0)


def _area(a: np.ndarray) -> np.ndarray:
    return (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[N, M] IoU of xyxy boxes a [N, 4] and b [M, 4]."""
    inter = _intersection(a, b)
    return inter / (_area(a)[:, None] + _area(b)[None, :] - inter + 1e-9)


def box_ioa(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[N, M] share of each box of a [N, 4] that lies inside each box of b [M, 4]."""
    return _intersection(a, b) / (_area(a) + 1e-9)[:, None]


def average_precision(scores: np.ndarray, matched: np.ndarray, num_gt: int) -> float:
    """VOC all-point interpolated AP."""
    if num_gt == 0:
        return float("nan")
    order = np.argsort(-scores)
    tp = matched[order].astype(np.float64)
    tp_cum, fp_cum = np.cumsum(tp), np.cumsum(1 - tp)
    recall = tp_cum / num_gt
    precision = tp_cum / np.maximum(tp_cum + fp_cum, 1e-9)
    mrec = np.concatenate([[0.0], recall, [1.0]])
    mpre = np.concatenate([[0.0], precision, [0.0]])
    mpre = np.maximum.accumulate(mpre[::-1])[::-1]
    steps = np.where(mrec[1:] != mrec[:-1])[0]
    return float(np.sum((mrec[steps + 1] - mrec[steps]) * mpre[steps + 1]))


@dataclass
class DetectionEvaluator:
    classes: tuple[str, ...]
    iou: float = 0.5
    recall_score: float = 0.3  # recall is reported at this working threshold
    _scores: dict[int, list] = field(default_factory=dict)
    _matched: dict[int, list] = field(default_factory=dict)
    _num_gt: dict[int, int] = field(default_factory=dict)
    _found: dict[int, int] = field(default_factory=dict)

    def add(self, xyxy: np.ndarray, score: np.ndarray, class_id: np.ndarray,
            gt_xyxy: np.ndarray, gt_class: np.ndarray, ignore_xyxy: np.ndarray | None = None) -> None:
        """One image: predictions and ground truth, class ids index `classes`. A
        prediction that matches no ground truth but lies mostly inside an ignore region
        (an object the labeller could not judge fairly, of any class) counts neither way."""
        for c in range(len(self.classes)):
            sel = class_id == c
            boxes, scores = xyxy[sel], score[sel]
            gt = gt_xyxy[gt_class == c]
            matched = np.zeros(len(scores), bool)
            if len(gt) and len(scores):
                order = np.argsort(-scores)
                ious = box_iou(boxes[order], gt)
                taken = np.zeros(len(gt), bool)
                for rank, det in enumerate(order):  # greedy, highest score first
                    candidates = np.where(taken, -1.0, ious[rank])
                    j = int(np.argmax(candidates))
                    if candidates[j] >= self.iou:
                        taken[j] = True
                        matched[det] = True
            if ignore_xyxy is not None and len(ignore_xyxy) and len(scores):
                kept = matched | (box_ioa(boxes, ignore_xyxy).max(1) < 0.5)
                boxes, scores, matched = boxes[kept], scores[kept], matched[kept]
            self._scores.setdefault(c, []).append(scores)
            self._matched.setdefault(c, []).append(matched)
            self._num_gt[c] = self._num_gt.get(c, 0) + len(gt)
            self._found[c] = self._found.get(c, 0) + int((matched & (scores >= self.recall_score)).sum())

    def result(self) -> dict:
        per_class, aps = {}, []
        for c, name in enumerate(self.classes):
            scores = np.concatenate(self._scores.get(c, [np.zeros(0)]))
            matched = np.concatenate(self._matched.get(c, [np.zeros(0, bool)]))
            num_gt = self._num_gt.get(c, 0)
            ap = average_precision(scores, matched, num_gt)
            aps.append(ap)
            per_class[name] = {"ap": round(ap, 4), f"recall_at_{self.recall_score}":
                               round(self._found.get(c, 0) / max(num_gt, 1), 4), "num_gt": num_gt}
        return {"iou": self.iou, "map": round(float(np.nanmean(aps)), 4), "per_class": per_class}
