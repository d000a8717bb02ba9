"""Cutting a stream's frames into blocks, and sampling each app's frame rate.

Frames are decoded once per stream; every app on that stream gets `block.select(mask)`
with its own sampler's mask, so a 5 fps app on a 30 fps camera sees every 6th frame
without a second decode.
"""

from __future__ import annotations

import math
from typing import Iterable, Iterator

import numpy as np

from core.frames import Frame, FrameBlock

MAX_FPS = 1000.0  # a sampler's highest rate; no camera delivers more


class BlockCutter:
    """Groups frames into blocks of at most `max_frames` frames and `max_duration_ms`
    of stream time. A block waits for its last frame, so on a live stream its duration
    adds to the first frame's latency: keep it well under the tightest SLO.

    A block closes on the frame after which the next one, a frame interval later (the
    latest seen), would not fit, rather than when that next frame arrives, which on a
    5 fps stream would hold a 300 ms block's first frame 400 ms, not 200."""

    def __init__(self, max_frames: int = 8, max_duration_ms: float | None = None) -> None:
        if max_frames < 1:
            raise ValueError(f"max_frames must be >= 1; was {max_frames}")
        if max_duration_ms is not None and max_duration_ms <= 0:
            raise ValueError(f"max_duration_ms must be > 0; was {max_duration_ms}")
        self.max_frames = max_frames
        self.max_duration_ms = max_duration_ms
        self._pending: list[Frame] = []
        self._next_block_id = 0
        self._last_pts_ms: float | None = None
        self._interval_ms: float | None = None  # between the two latest frames

    def add(self, frame: Frame) -> FrameBlock | None:
        """Add a frame; returns a finished block when this frame completes or starts one."""
        done = None
        if self._pending and self.max_duration_ms is not None and \
                frame.pts_ms - self._pending[0].pts_ms >= self.max_duration_ms:
            done = self.flush()
        self._pending.append(frame)
        if self._last_pts_ms is not None and frame.pts_ms > self._last_pts_ms:
            self._interval_ms = frame.pts_ms - self._last_pts_ms
        self._last_pts_ms = frame.pts_ms
        if len(self._pending) >= self.max_frames:
            # A block closed by time above left one frame here, which can only fill a
            # block when max_frames == 1, and then nothing was pending before it.
            assert done is None
            done = self.flush()
        elif done is None and self._next_falls_outside(frame):
            # (after a gap that closed a block above, this frame waits for the next:
            # one frame returns one block at most)
            done = self.flush()
        return done

    def _next_falls_outside(self, frame: Frame) -> bool:
        if self.max_duration_ms is None or self._interval_ms is None:
            return False
        return frame.pts_ms + self._interval_ms - self._pending[0].pts_ms >= self.max_duration_ms

    def flush(self) -> FrameBlock | None:
        if not self._pending:
            return None
        block = FrameBlock.from_frames(self._next_block_id, self._pending)
        self._next_block_id += 1
        self._pending = []
        return block


def cut_blocks(frames: Iterable[Frame], max_frames: int = 8,
               max_duration_ms: float | None = None) -> Iterator[FrameBlock]:
    """Blocks in order. When the frames fail part-way, the frames already received still
    come out as a last block before the error is raised."""
    cutter = BlockCutter(max_frames, max_duration_ms)
    try:
        for frame in frames:
            block = cutter.add(frame)
            if block is not None:
                yield block
    except Exception:
        last = cutter.flush()
        if last is not None:
            yield last
        raise
    last = cutter.flush()
    if last is not None:
        yield last


class FrameSampler:
    """Keeps frames at a target rate by stream time. The state is one counter, the
    time the next frame is due; `fps=None` keeps every frame."""

    def __init__(self, fps: float | None) -> None:
        if fps is not None and not (0 < fps <= MAX_FPS):
            raise ValueError(f"fps must be in (0, {MAX_FPS}] or None for every frame; was {fps}")
        self.period_ms = None if fps is None else 1000.0 / fps
        self.next_due_ms: float | None = None

    @property
    def fps(self) -> float | None:
        return None if self.period_ms is None else 1000.0 / self.period_ms

    def set_fps(self, fps: float) -> None:
        """A new rate from the next due frame on (load control lowers and restores it)."""
        if not (0 < fps <= MAX_FPS):
            raise ValueError(f"fps must be in (0, {MAX_FPS}]; was {fps}")
        self.period_ms = 1000.0 / fps

    def due(self, pts_ms: float) -> bool:
        """Whether `wants(pts_ms)` would keep the frame, without taking it. Half a
        millisecond of slack absorbs rounding in container timestamps."""
        return self.period_ms is None or self.next_due_ms is None or pts_ms >= self.next_due_ms - 0.5

    def wants(self, pts_ms: float) -> bool:
        if self.period_ms is None:
            return True
        if not self.due(pts_ms):
            return False
        due = pts_ms if self.next_due_ms is None else self.next_due_ms
        # the first due time past this frame, computed directly: a stream that jumps
        # ahead (a camera back after an hour) costs one step, not one per missed period
        self.next_due_ms = due + (math.floor((pts_ms + 0.5 - due) / self.period_ms) + 1) * self.period_ms
        return True

    def mask(self, block: FrameBlock) -> np.ndarray:
        return np.array([self.wants(float(t)) for t in block.pts_ms], dtype=bool)
