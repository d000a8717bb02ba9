"""The unit of video that travels from ingest to the engine: `Frame` and `FrameBlock`.

A `FrameBlock` is built by `streams` and reaches the engine and the apps unchanged;
selecting a subset of its frames (per-app frame-rate sampling) gives another block
that shares the pixel memory when the frames kept are evenly spaced (a slice): blocks
are read, never written, after they are cut.
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
        if mask.all():
            return self
        pick = _as_slice(np.flatnonzero(mask))
        pick = mask if pick is None else pick  # a view when the frames kept are evenly spaced
        return FrameBlock(self.stream_id, self.block_id, self.frame_ids[pick], self.pts_ms[pick],
                          self.capture_ms[pick], self.pixels[pick])

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


def _as_slice(idx: np.ndarray) -> slice | None:
    """`idx` (ascending) as a slice when its steps are all equal (None otherwise): every
    frame, every k-th, one frame or none, as frame-rate sampling mostly keeps them."""
    if len(idx) < 2:
        return slice(int(idx[0]), int(idx[0]) + 1) if len(idx) else slice(0, 0)
    steps = np.diff(idx)
    if not (steps == steps[0]).all():
        return None
    return slice(int(idx[0]), int(idx[-1]) + 1, int(steps[0]))
