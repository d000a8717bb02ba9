"""OpenCV's classical detectors, run by the engine's `opencv_hog` and `opencv_haar` adapters.

HOG + linear SVM (Dalal & Triggs) is made for upright people about 128 px tall in a
64x128 window; `upscale` enlarges the frame first so smaller people reach that size.
The SVM margin becomes a confidence by a logistic squash; overlapping windows are
merged by non-maximum suppression. Haar cascades (Viola & Jones) come from the files
OpenCV ships (`cv2.data.haarcascades`), e.g. `haarcascade_fullbody.xml`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from core.detections import Detections
from models.loaded import Fragment, LoadedModel, list_collate, list_split
from models.repository import ModelSpec, RepositoryError


@dataclass(frozen=True)
class HogOptions:
    upscale: float = 1.0
    win_stride: int = 8
    scale: float = 1.05  # pyramid step
    hit_threshold: float = 0.0  # SVM margin below which windows are ignored
    nms_iou: float = 0.45
    max_height: float = 0.6  # drop windows taller than this fraction of the frame (groups, facades)

    def __post_init__(self) -> None:
        if not 0.25 <= self.upscale <= 4:
            raise ValueError(f"upscale must be in [0.25, 4]; was {self.upscale}")
        if not 0 < self.max_height <= 1:
            raise ValueError(f"max_height is a fraction of the frame height in (0, 1]; was {self.max_height}")
        if self.scale <= 1.0:
            raise ValueError(f"scale (pyramid step) must be > 1; was {self.scale}")


class HogDetector:
    labels = ("person",)

    def __init__(self, options: HogOptions = HogOptions()) -> None:
        self.options = options
        self._hog = cv2.HOGDescriptor()
        self._hog.setSVMDetector(cv2.HOGDescriptor_getDefaultPeopleDetector())

    def detect(self, images: list[np.ndarray]) -> list[Detections]:
        return [self._detect_one(image) for image in images]

    def _detect_one(self, image: np.ndarray) -> Detections:
        o = self.options
        gray = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)
        if o.upscale != 1.0:
            gray = cv2.resize(gray, None, fx=o.upscale, fy=o.upscale, interpolation=cv2.INTER_LINEAR)
        if gray.shape[0] < 128 or gray.shape[1] < 64:  # smaller than one detection window
            return Detections.empty()
        rects, weights = self._hog.detectMultiScale(gray, hitThreshold=o.hit_threshold,
                                                    winStride=(o.win_stride, o.win_stride),
                                                    padding=(8, 8), scale=o.scale)
        if len(rects) == 0:
            return Detections.empty()
        # The SVM margin becomes a confidence by a logistic squash.
        confidence = 1.0 / (1.0 + np.exp(-2.0 * np.asarray(weights, np.float32).reshape(-1)))
        keep = cv2.dnn.NMSBoxes(rects.tolist(), confidence.tolist(), 0.0, o.nms_iou)
        keep = np.asarray(keep, np.int64).reshape(-1)
        rects = rects[keep].astype(np.float32) / o.upscale
        # The default people detector's windows are ~20% taller and wider than the person.
        x, y, w, h = rects.T
        xyxy = np.stack([x + 0.1 * w, y + 0.06 * h, x + 0.9 * w, y + 0.94 * h], axis=1)
        small = (xyxy[:, 3] - xyxy[:, 1]) <= o.max_height * image.shape[0]
        return Detections(xyxy[small], confidence[keep][small], np.zeros(int(small.sum()), np.int64))


@dataclass(frozen=True)
class HaarOptions:
    cascade: str = "haarcascade_fullbody.xml"
    scale_factor: float = 1.1
    min_neighbors: int = 3

    def __post_init__(self) -> None:
        if self.scale_factor <= 1.0:
            raise ValueError(f"scale_factor must be > 1; was {self.scale_factor}")


class HaarDetector:
    labels = ("object",)

    def __init__(self, options: HaarOptions = HaarOptions()) -> None:
        path = Path(cv2.data.haarcascades) / options.cascade
        self._cascade = cv2.CascadeClassifier(str(path))
        if self._cascade.empty():
            raise ValueError(f"cascade: {options.cascade!r} is not one of OpenCV's cascades in {path.parent}")
        self.options = options

    def detect(self, images: list[np.ndarray]) -> list[Detections]:
        out = []
        for image in images:
            gray = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)
            rects, _, weights = self._cascade.detectMultiScale3(
                gray, scaleFactor=self.options.scale_factor, minNeighbors=self.options.min_neighbors,
                outputRejectLevels=True)
            rects = np.asarray(rects, np.float32).reshape(-1, 4)
            xyxy = np.concatenate([rects[:, :2], rects[:, :2] + rects[:, 2:]], axis=1)
            confidence = 1.0 / (1.0 + np.exp(-np.asarray(weights, np.float32).reshape(-1)))
            out.append(Detections(xyxy, confidence, np.zeros(len(rects), np.int64)))
        return out


def load(spec: ModelSpec, folder: Path, version: int, device: str) -> LoadedModel:
    """OpenCV's classical detectors run on the CPU on whole frames, one frame at a time."""
    try:
        if spec.adapter == "opencv_hog":
            detector = HogDetector(HogOptions(**spec.config))
        else:
            detector = HaarDetector(HaarOptions(**spec.config))
    except (TypeError, ValueError) as exc:
        raise RepositoryError(f"{folder / 'model.yaml'}: config: {exc}") from None
    if spec.split:
        raise RepositoryError(f"{folder / 'model.yaml'}: split: OpenCV detectors run as one fragment")
    digest = hashlib.sha256(json.dumps({"adapter": spec.adapter, "config": spec.config}, sort_keys=True).encode())
    frag = Fragment("model", digest.hexdigest(), None, detector.detect, list_collate, list_split, detector)
    return LoadedModel(spec, version, folder, "cpu", {"model": frag}, False, lambda frames: list(frames))
