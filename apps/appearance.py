"""What a detection looks like, in a few numbers, for telling people apart where their
boxes overlap: the mean colour of the middle of each box (a person's torso, a car's
body), where the background shows least.

A box whose middle is partly covered by another box is not clear: its colour may be
the one in front's, so the tracker trusts it less and does not learn from it. Nor is a
box the frame's border may cut: its middle is the middle of the part in view, another
part of the object from one frame to the next as it comes in or goes out. Which of
two overlapping boxes is in front comes from the ground: the one whose bottom edge is
higher in the picture stands farther from the camera, and of two standing level either
may be. The colours need the frame's pixels; whether a box is clear needs only the
boxes and the frame's size, so an app whose frames are elsewhere (an app actor of
`vigil serve --cluster`) is sent just the colours.
"""

from __future__ import annotations

from typing import NamedTuple

import cv2
import numpy as np

from apps.border import cut

# the part of the box the colour is taken from, as shares of its width and height: the
# middle third across, and from a fifth to a half down (below a head, above the legs)
_X = (1 / 3, 2 / 3)
_Y = (0.2, 0.5)
LEVEL = 2.0  # boxes whose bottoms are this close (pixels) may be either in front of the other
OVERLAP = 0.1  # a box whose middle shares more of its area than this with a box in front is not clear


class Looks(NamedTuple):
    colour: np.ndarray  # (N, 3) float32 mean RGB; NaN for a box with no pixels in its middle
    clear: np.ndarray  # (N,) bool: no box in front of its middle and, given a frame size, not cut by its border


def looks(colour: np.ndarray, xyxy: np.ndarray, frame_size: tuple[int, int] | None = None) -> Looks:
    """`frame_size` (width, height): boxes it may cut are not clear either."""
    clear = ~behind(xyxy)
    return Looks(colour, clear if frame_size is None else clear & ~cut(xyxy, frame_size))


def colours(frame: np.ndarray, xyxy: np.ndarray) -> np.ndarray:
    """`frame`: [H, W, 3] uint8 RGB; `xyxy`: (N, 4) boxes in its pixels."""
    out = np.full((len(xyxy), 3), np.nan, np.float32)
    if not len(xyxy):
        return out
    h, w = frame.shape[:2]
    b = np.asarray(xyxy, np.float64)
    m = _middles(b)
    c1, c2 = np.clip(m[:, 0], 0, w).astype(np.int64), np.clip(np.ceil(m[:, 2]), 0, w).astype(np.int64)
    r1, r2 = np.clip(m[:, 1], 0, h).astype(np.int64), np.clip(np.ceil(m[:, 3]), 0, h).astype(np.int64)
    for k in np.flatnonzero((c2 > c1) & (r2 > r1)):
        # cv2.mean, not numpy: on crops this small numpy's per-call overhead dominates
        out[k] = cv2.mean(frame[r1[k]:r2[k], c1[k]:c2[k]])[:3]
    return out


def _middles(b: np.ndarray) -> np.ndarray:
    """(N, 4) the part of each box (xyxy, float64) its colour is taken from."""
    bw, bh = b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]
    return np.stack([b[:, 0] + _X[0] * bw, b[:, 1] + _Y[0] * bh, b[:, 0] + _X[1] * bw, b[:, 1] + _Y[1] * bh], 1)


def behind(xyxy: np.ndarray) -> np.ndarray:
    """(N,) bool: boxes whose middle (where the colour is taken) shares more than OVERLAP
    of its area with a box whose bottom edge is lower in the picture (nearer the camera)."""
    b = np.asarray(xyxy, np.float64)
    if len(b) < 2:
        return np.zeros(len(b), bool)
    m = _middles(b)
    iw = np.clip(np.minimum(m[:, None, 2], b[None, :, 2]) - np.maximum(m[:, None, 0], b[None, :, 0]), 0, None)
    ih = np.clip(np.minimum(m[:, None, 3], b[None, :, 3]) - np.maximum(m[:, None, 1], b[None, :, 1]), 0, None)
    shared = iw * ih
    np.fill_diagonal(shared, 0.0)
    area = np.maximum((m[:, 2] - m[:, 0]) * (m[:, 3] - m[:, 1]), 1e-9)
    nearer = b[None, :, 3] > b[:, None, 3] - LEVEL
    return ((shared / area[:, None] > OVERLAP) & nearer).any(1)
