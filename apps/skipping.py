"""Static-frame skipping: reuse the last result while the picture has not changed.

The difference detector compares a coarse grey thumbnail (one cell per `cell_px`
square) with the thumbnail of the last analysed frame, after dividing out the global
brightness (a lighting drift changes every cell alike and is not an event). The
largest cell change decides: averaging over a cell removes sensor noise, and a person
entering changes the cells it covers by tens of levels while the mean over the whole
frame would barely move. `max_skip_s` bounds how stale a reused result may get.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from apps.spec import SkipOptions


@dataclass
class StaticFrameFilter:
    options: SkipOptions
    _last: np.ndarray | None = None  # thumbnail of the last analysed frame
    _last_ms: float = float("-inf")
    num_skipped: int = 0

    def thumbnail(self, image: np.ndarray) -> np.ndarray:
        h, w = image.shape[:2]
        cell = self.options.cell_px
        gray = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)
        return cv2.resize(gray, (max(1, w // cell), max(1, h // cell)), interpolation=cv2.INTER_AREA).astype(np.float32)

    def change(self, thumb: np.ndarray) -> float:
        """Largest cell change against the last analysed frame, in 8-bit levels."""
        if self._last is None:
            return float("inf")
        gain = float(self._last.mean()) / max(float(thumb.mean()), 1e-3)
        return float(np.abs(thumb * gain - self._last).max())

    def should_skip(self, image: np.ndarray, t_ms: float) -> bool:
        """True: reuse the last result. False: analyse it (and remember it as the last)."""
        thumb = self.thumbnail(image)
        if t_ms - self._last_ms < self.options.max_skip_s * 1000.0 and self.change(thumb) < self.options.threshold:
            self.num_skipped += 1
            return True
        self._last, self._last_ms = thumb, t_ms
        return False
