"""The unit of video that travels from ingest to the engine: `Frame` and `FrameBlock`.

A `FrameBlock` is built by `streams` and reaches the engine and the apps unchanged;
selecting a subset of its frames (per-app frame-rate sampling) gives another block
that shares the pixel memory when the selection is a slice.
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
    pixels: np.ndarray  # [N, H, W, 3] uint8 RGB

    def __post_init__(self) -> None:
        n = len(self.frame_ids)
        if self.pixels.ndim != 4 or self.pixels.shape[3] != 3 or self.pixels.dtype != np.uint8:
            raise ValueError(f"pixels must be [N, H, W, 3] uint8; was {self.pixels.shape} {self.pixels.dtype}")
        if not (len(self.pts_ms) == len(self.capture_ms) == self.pixels.shape[0] == n):
            raise ValueError(f"block arrays disagree on N: frame_ids {n}, pts_ms {len(self.pts_ms)}, "
                             f"capture_ms {len(self.capture_ms)}, pixels {self.pixels.shape[0]}")

    def __len__(self) -> int:
        return len(self.frame_ids)

    @property
    def size(self) -> tuple[int, int]:
        """(width, height)"""
        return self.pixels.shape[2], self.pixels.shape[1]

    def select(self, keep: np.ndarray | list[bool]) -> "FrameBlock":
        """The frames where `keep` is true (a boolean mask), as a block with the same id."""
        mask = np.asarray(keep, dtype=bool)
        if mask.shape != (len(self),):
            raise ValueError(f"selection mask must have shape ({len(self)},); was {mask.shape}")
        return FrameBlock(self.stream_id, self.block_id, self.frame_ids[mask], self.pts_ms[mask],
                          self.capture_ms[mask], self.pixels[mask])

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
                   np.stack([f.image for f in frames]))
