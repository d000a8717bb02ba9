"""The unit of video that travels from ingest to the engine: `Frame` and `FrameBlock`.

A `FrameBlock` is built by `streams` and reaches the engine and the apps unchanged.
Its pixels are its frames' own arrays, as the decoder made them: cutting a block
copies no pixel, and neither does selecting a subset of its frames (per-app
frame-rate sampling). Stacking them into one [N, H, W, 3] array would copy every
frame, a visible share of a stream worker's time with many cameras (py-spy), where nothing
downstream needs the stack: the engine takes one frame per request. Blocks are read,
never written, after they are cut.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Frame:
    stream_id: str
    frame_id: int  # position in the stream's decode order, from 0
    pts_ms: float  # presentation time in stream time
    capture_ms: float  # monotonic clock when the frame entered the pipeline; deadlines start here
    image: np.ndarray  # [H, W, 3] uint8 RGB


@dataclass(frozen=True)
class FrameBlock:
    stream_id: str
    block_id: int
    frame_ids: np.ndarray  # [N] int64
    pts_ms: np.ndarray  # [N] float64
    capture_ms: np.ndarray  # [N] float64
    # N frames, each [H, W, 3] uint8 RGB, all of one size; an [N, H, W, 3] array is taken
    # as its N frames (views of it)
    pixels: tuple[np.ndarray, ...]

    def __post_init__(self) -> None:
        n = len(self.frame_ids)
        if isinstance(self.pixels, np.ndarray) and self.pixels.ndim != 4:
            raise ValueError(f"pixels must be [N, H, W, 3] uint8; was {self.pixels.shape} {self.pixels.dtype}")
        frames = tuple(self.pixels)
        object.__setattr__(self, "pixels", frames)
        for image in frames:
            if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8 or image.shape != frames[0].shape:
                raise ValueError(f"pixels must be N frames of one size, each [H, W, 3] uint8; a frame was "
                                 f"{image.shape} {image.dtype}, the first {frames[0].shape}")
        if not (len(self.pts_ms) == len(self.capture_ms) == len(frames) == n):
            raise ValueError(f"block arrays disagree on N: frame_ids {n}, pts_ms {len(self.pts_ms)}, "
                             f"capture_ms {len(self.capture_ms)}, pixels {len(frames)}")

    def __len__(self) -> int:
        return len(self.frame_ids)

    @property
    def size(self) -> tuple[int, int]:
        """(width, height)"""
        if not self.pixels:
            raise ValueError("a block of no frames has no size")
        return self.pixels[0].shape[1], self.pixels[0].shape[0]

    def select(self, keep: np.ndarray | list[bool]) -> "FrameBlock":
        """The frames where `keep` is true (a boolean mask), as a block with the same id."""
        mask = np.asarray(keep, dtype=bool)
        if mask.shape != (len(self),):
            raise ValueError(f"selection mask must have shape ({len(self)},); was {mask.shape}")
        if mask.all():
            return self
        pick = np.flatnonzero(mask)
        return FrameBlock(self.stream_id, self.block_id, self.frame_ids[pick], self.pts_ms[pick],
                          self.capture_ms[pick], tuple(self.pixels[i] for i in pick))

    def frame(self, i: int) -> Frame:
        return Frame(self.stream_id, int(self.frame_ids[i]), float(self.pts_ms[i]),
                     float(self.capture_ms[i]), self.pixels[i])

    @classmethod
    def from_frames(cls, block_id: int, frames: list[Frame]) -> "FrameBlock":
        if not frames:
            raise ValueError("a block needs at least one frame")
        return cls(frames[0].stream_id, block_id,
                   np.array([f.frame_id for f in frames], np.int64),
                   np.array([f.pts_ms for f in frames], np.float64),
                   np.array([f.capture_ms for f in frames], np.float64),
                   tuple(f.image for f in frames))

