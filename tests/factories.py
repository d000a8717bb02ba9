"""Builders for test inputs, in one place."""

from __future__ import annotations

import numpy as np

from core.detections import Detections
from core.frames import Frame, FrameBlock


def make_frame(frame_id: int = 0, pts_ms: float | None = None, stream_id: str = "cam",
               size: tuple[int, int] = (32, 24), value: int = 0) -> Frame:
    w, h = size
    return Frame(stream_id, frame_id, frame_id * 40.0 if pts_ms is None else pts_ms, 1000.0 + frame_id,
                 np.full((h, w, 3), value, np.uint8))


def make_block(num_frames: int = 4, fps: float = 25.0, start: int = 0, block_id: int = 0,
               size: tuple[int, int] = (32, 24)) -> FrameBlock:
    frames = [make_frame(start + i, (start + i) * 1000.0 / fps, size=size) for i in range(num_frames)]
    return FrameBlock.from_frames(block_id, frames)


def make_detections(boxes: list[list[float]], class_id: list[int] | None = None,
                    confidence: list[float] | None = None, tracker_id: list[int] | None = None) -> Detections:
    n = len(boxes)
    return Detections(np.array(boxes, np.float32).reshape(-1, 4),
                      np.array(confidence if confidence is not None else [0.9] * n, np.float32),
                      np.array(class_id if class_id is not None else [0] * n, np.int64),
                      None if tracker_id is None else np.array(tracker_id, np.int64))


def box_at(cx: float, cy: float, w: float = 10.0, h: float = 20.0) -> list[float]:
    return [cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]


def make_profile(per_item_ms: float = 10.0, fixed_ms: float = 5.0, sizes=(1, 2, 4, 8, 16), std_ms: float = 0.0,
                 fragment_hash: str = "h"):
    """A linear profile l(b) = fixed + per_item * b."""
    from engine.profiles import Profile

    return Profile(fragment_hash, "test", tuple(sizes), tuple(fixed_ms + per_item_ms * b for b in sizes),
                   tuple(std_ms for _ in sizes))


def make_item(item_id: int, deadline_ms: float, arrival_ms: float = 0.0, budget_ms: float | None = None,
              priority: int = 0):
    from engine.scheduler import WorkItem

    return WorkItem(item_id, arrival_ms, deadline_ms, budget_ms if budget_ms is not None else deadline_ms - arrival_ms,
                    priority)
