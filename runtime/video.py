"""Writing annotated video with PyAV (H.264)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np


class VideoWriter:
    def __init__(self, path: Path, fps: float, size: tuple[int, int], crf: int = 26) -> None:
        width, height = size
        self._container = av.open(str(path), "w", options={"movflags": "+faststart"})
        self._stream = self._container.add_stream("libx264", rate=Fraction(fps).limit_denominator(1001))
        # yuv420p needs even sizes; a 1-pixel crop is invisible
        self._width, self._height = width - width % 2, height - height % 2
        self._stream.width, self._stream.height = self._width, self._height
        self._stream.pix_fmt = "yuv420p"
        self._stream.options = {"crf": str(crf), "preset": "veryfast"}
        self._count = 0

    def write(self, image: np.ndarray) -> None:
        """[H, W, 3] uint8 RGB."""
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image[: self._height, : self._width]),
                                           format="rgb24")
        frame.pts = self._count
        self._count += 1
        for packet in self._stream.encode(frame):
            self._container.mux(packet)

    def close(self) -> None:
        for packet in self._stream.encode():
            self._container.mux(packet)
        self._container.close()

    def __enter__(self) -> "VideoWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
