"""Moving-blob detection by background subtraction.

The background model adapts, so a gradual lighting change is absorbed. What moves
differs from the recent scene (the frames' running mean over about `still_s`); a
foreground pixel that matches it is not moving, whatever it is (a ghost where someone
stood while the model began, sunlight spreading over the ground, a stopped object): it
is taken into the background at once, so a region stays the size of what moves instead
of growing for the minute `learn_foreground` takes. Shadows are detected and dropped.
Blobs have no class ("motion"); for classes use a trained model. Motion masks are
polygons where nothing counts as moving (trees in the wind, a clock burnt into the
picture): masked pixels never join a blob.
"""

from __future__ import annotations

import math
from typing import Annotated

import cv2
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator

from core.detections import Detections
from core.frames import FrameBlock
from core.numbers import json_int

# a mask's coordinate: the validator below names a point outside the frame in words, and
# the JSON schema states the same bound, so the OpenAPI document promises what is accepted
Normalized = Annotated[float, WithJsonSchema({"type": "number", "minimum": 0, "maximum": 1})]


class MotionOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)

    threshold: float = Field(28.0, gt=0, le=255, description="per-channel difference (8-bit levels) that makes a "
                                                              "pixel foreground")
    warmup_frames: json_int(ge=0, le=10_000) = Field(30, description="the first frames learn everywhere, so early "
                                                                 "ghosts fade")
    learn_background: float = Field(0.05, gt=0, lt=1, description="update rate where the scene looks like "
                                                                   "background")
    learn_foreground: float = Field(0.004, gt=0, lt=1, description="where it does not: slower, so that a walker "
                                                                    "who pauses stays visible")
    still_s: float = Field(2.0, gt=0, le=3600, description="time constant, in seconds of stream time, of the "
                                                             "recent scene (the frames' running mean): a "
                                                             "foreground pixel within `threshold` of it has not "
                                                             "moved for about this long, and is background")
    min_area: float = Field(0.0006, gt=0, lt=1, description="smallest blob, as a fraction of the frame")
    open_px: json_int(ge=1, le=64) = Field(3, description="morphological opening (removes noise specks)")
    close_px: json_int(ge=1, le=64) = Field(7, description="morphological closing (joins a figure's limbs into "
                                                           "one blob)")
    masks: list[Annotated[list[Annotated[list[Normalized], Field(min_length=2, max_length=2)]],
                          Field(min_length=3, max_length=256)]] = Field(
        default_factory=list, max_length=32, description="motion masks: polygons (points normalized to 0..1) where "
                                                         "motion is ignored")

    @field_validator("masks")
    @classmethod
    def _inside(cls, v: list) -> list:
        for i, polygon in enumerate(v):
            for x, y in polygon:
                if not (0.0 <= x <= 1.0 and 0.0 <= y <= 1.0):
                    raise ValueError(f"mask {i}: point ({x}, {y}) is outside the frame; coordinates are "
                                     "normalized to 0..1")
        return v


class BackgroundModel:
    """Running-average background with global gain compensation, selective update and
    still foreground let go.

    Why not MOG2: MOG2 learns every pixel at one rate, so it either follows lighting
    (and swallows a walker who slows down) or keeps what it learnt wrong for long (and
    drowns in a lighting drift). Dividing out the global gain first lets the background
    learn slowly, and learning foreground pixels slower still keeps a pausing walker
    visible. What that slow rate would keep for a minute (a ghost, a patch of light, an
    object that stopped) is not moving: it matches the recent scene, and is taken into
    the background at once.
    """

    def __init__(self, options: MotionOptions) -> None:
        self.options = options
        self.background: np.ndarray | None = None  # [H, W, 3] float32
        self.recent: np.ndarray | None = None  # [H, W, 3] float32: the frames' running mean over ~still_s
        self.recent_ms = 0.0  # the stream time of the last frame in it
        self.num_frames = 0

    def apply(self, image: np.ndarray, t_ms: float) -> np.ndarray:
        """Foreground mask [H, W] uint8 (255 = foreground), shadows and still pixels
        excluded; `t_ms`: the frame's stream time, rising from call to call."""
        o = self.options
        frame = image.astype(np.float32)
        if self.background is None:
            self.background = frame.copy()
        bg = self.background
        # Global gain per channel from a sparse grid; the median ignores moving objects.
        sample = (slice(None, None, 7), slice(None, None, 7))
        gain = np.median(frame[sample] + 1.0, axis=(0, 1)) / np.median(bg[sample] + 1.0, axis=(0, 1))
        frame /= gain
        delta = frame - bg
        diff = _channel_max(np.abs(delta))
        ratio = (frame + 1.0) / (bg + 1.0)
        # A shadow darkens every channel by about the same factor.
        hi, lo = _channel_max(ratio), _channel_min(ratio)
        shadow = (hi < 0.92) & (lo > 0.45) & (hi - lo < 0.12)
        fg = (diff > o.threshold) & ~shadow
        still = self._still(frame, fg, t_ms)
        if self.num_frames < o.warmup_frames:
            rate = np.full(fg.shape, max(1.0 / (self.num_frames + 1), o.learn_background), np.float32)
        else:
            rate = np.where(fg, np.float32(o.learn_foreground), np.float32(o.learn_background))
        rate[still] = 1.0
        fg &= ~still
        delta *= rate[..., None]
        bg += delta
        self.num_frames += 1
        return fg.view(np.uint8) * np.uint8(255)

    def _still(self, frame: np.ndarray, fg: np.ndarray, t_ms: float) -> np.ndarray:
        """[H, W] bool: the foreground pixels within `threshold` of the recent scene, the
        frames' running mean with a time constant of `still_s` (`frame`: gain-compensated).
        What moves differs from that mean; what has stood still a while (or was never
        there: the background learnt it wrongly) matches it. One passer-by leaves only
        a trace in the mean, so a ghost on a path people keep walking is still let go."""
        if self.recent is None or self.recent.shape != frame.shape:
            self.recent, self.recent_ms = frame.copy(), t_ms
        elapsed_s = max(0.0, t_ms - self.recent_ms) / 1000.0
        self.recent += np.float32(1.0 - math.exp(-elapsed_s / self.options.still_s)) * (frame - self.recent)
        self.recent_ms = t_ms
        return fg & (_channel_max(np.abs(frame - self.recent)) <= self.options.threshold)


# numpy reduces a last axis of three slowly, a strided loop per pixel; two elementwise
# passes over the channels' views give the same values in a fraction of the time
def _channel_max(x: np.ndarray) -> np.ndarray:
    return np.maximum(np.maximum(x[..., 0], x[..., 1]), x[..., 2])


def _channel_min(x: np.ndarray) -> np.ndarray:
    return np.minimum(np.minimum(x[..., 0], x[..., 1]), x[..., 2])


class MotionDetector:
    labels = ("motion",)

    def __init__(self, options: MotionOptions = MotionOptions()) -> None:
        self.options = options
        self._background = BackgroundModel(options)
        self._open = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (options.open_px, options.open_px))
        self._close = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (options.close_px, options.close_px))
        self.last_mask: np.ndarray | None = None  # [H, W] uint8, for annotation and debugging
        self._ignored: np.ndarray | None = None  # [H, W] bool: under a motion mask, for the frames' size

    def ignored(self, height: int, width: int) -> np.ndarray | None:
        """Where the motion masks lie at this frame size (None: no masks)."""
        if not self.options.masks:
            return None
        if self._ignored is None or self._ignored.shape != (height, width):
            raster = np.zeros((height, width), np.uint8)
            scale = np.array([width, height], np.float64)
            polygons = [np.round(np.asarray(m, np.float64) * scale).astype(np.int32) for m in self.options.masks]
            cv2.fillPoly(raster, polygons, 255)
            self._ignored = raster > 0
        return self._ignored

    def detect(self, block: FrameBlock) -> list[Detections]:
        return [self._detect_one(image, float(t_ms)) for image, t_ms in zip(block.pixels, block.pts_ms)]

    def _detect_one(self, image: np.ndarray, t_ms: float) -> Detections:
        fg = self._background.apply(image, t_ms)
        ignored = self.ignored(*fg.shape)
        if ignored is not None:
            fg[ignored] = 0
        fg = cv2.morphologyEx(fg, cv2.MORPH_OPEN, self._open)
        fg = cv2.morphologyEx(fg, cv2.MORPH_CLOSE, self._close)
        self.last_mask = fg
        count, _, stats, _ = cv2.connectedComponentsWithStats(fg, connectivity=8)
        min_px = self.options.min_area * fg.shape[0] * fg.shape[1]
        stats = stats[1:count]  # label 0 is the background
        stats = stats[stats[:, cv2.CC_STAT_AREA] >= min_px]
        if len(stats) == 0:
            return Detections.empty()
        x, y = stats[:, cv2.CC_STAT_LEFT], stats[:, cv2.CC_STAT_TOP]
        w, h = stats[:, cv2.CC_STAT_WIDTH], stats[:, cv2.CC_STAT_HEIGHT]
        xyxy = np.stack([x, y, x + w, y + h], axis=1).astype(np.float32)
        # Confidence grows with how solid the blob is: noise is ragged, objects are not.
        fill = stats[:, cv2.CC_STAT_AREA] / np.maximum(w * h, 1)
        confidence = np.clip(0.4 + fill, 0.0, 1.0)
        return Detections(xyxy, confidence, np.zeros(len(stats), np.int64))
