"""Each app's latest analysed frame, as `GET /v1/apps/{name}/frame.jpg` serves it.

The worker keeps a copy of the frame and what to draw on it (apps/annotate.py's
`Overlay`, copied out of the app) about once a second; the drawing and the JPEG are
made only when someone asks, once per kept frame. Encoding every app's frame every
second whether or not anyone looks would take a real share of the stream workers' CPU
with many cameras (py-spy on `vigil serve`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from apps.annotate import Overlay, draw_overlay
from runtime.jpeg import rgb_jpeg

JPEG_QUALITY = 80


@dataclass
class _Kept:
    pixels: np.ndarray  # [H, W, 3] uint8 RGB, owned
    drawn: Overlay
    color_index: int
    jpeg: bytes | None = None  # made at the first request


class LiveFrames:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: dict[str, _Kept] = {}

    def keep(self, app: str, pixels: np.ndarray, drawn: Overlay, color_index: int) -> None:
        """`pixels` is copied: the block it comes from is not held."""
        kept = _Kept(pixels.copy(), drawn, color_index)
        with self._lock:
            self._kept[app] = kept

    def forget(self, app: str) -> None:
        with self._lock:
            self._kept.pop(app, None)

    def jpeg(self, app: str) -> bytes | None:
        """The app's latest frame with its overlay, JPEG; None before its first."""
        with self._lock:
            kept = self._kept.get(app)
        if kept is None:
            return None
        if kept.jpeg is None:  # two first requests may both encode: the same bytes, no harm
            img = kept.pixels.copy()
            draw_overlay(img, kept.drawn, kept.color_index)
            kept.jpeg = rgb_jpeg(img, JPEG_QUALITY)
        return kept.jpeg
