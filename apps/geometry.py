"""Plane geometry for lines and zones, vectorised over points."""

from __future__ import annotations

import numpy as np


def side_of_line(a: np.ndarray, b: np.ndarray, points: np.ndarray) -> np.ndarray:
    """[N] signed distance (pixels) of points from the line A->B; positive on the "in"
    side, the one B - A turned 90 degrees clockwise on screen points to (y down)."""
    ab = b - a
    normal = np.array([-ab[1], ab[0]]) / np.hypot(*ab)
    return (points - a) @ normal


def along_line(a: np.ndarray, b: np.ndarray, points: np.ndarray) -> np.ndarray:
    """[N] position of each point's projection on A->B: 0 at A, 1 at B."""
    ab = b - a
    return (points - a) @ ab / (ab @ ab)


def in_polygon(polygon: np.ndarray, points: np.ndarray) -> np.ndarray:
    """[N] bool: points inside the polygon [K, 2] (even-odd rule)."""
    x, y = points[:, 0:1], points[:, 1:2]  # [N, 1]
    x0, y0 = polygon[:, 0], polygon[:, 1]  # [K]
    x1, y1 = np.roll(x0, -1), np.roll(y0, -1)
    straddles = (y0 > y) != (y1 > y)  # [N, K]
    with np.errstate(divide="ignore", invalid="ignore"):
        x_cross = x0 + (y - y0) * (x1 - x0) / (y1 - y0)
    return ((straddles & (x < x_cross)).sum(axis=1) % 2) == 1
