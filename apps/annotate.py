"""Drawing app results on frames: boxes with track ids, lines with running counts,
zones with occupancy. Takes and returns RGB frames; one colour per app."""

from __future__ import annotations

import cv2
import numpy as np

from apps.app import App
from engine.detections import Detections

PALETTE = [(255, 80, 80), (80, 200, 255), (120, 255, 120), (255, 200, 60), (220, 120, 255), (255, 255, 255)]


def _label(img: np.ndarray, text: str, org: tuple[int, int], color: tuple[int, int, int], scale: float = 0.4) -> None:
    (w, h), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, 1)
    x, y = max(0, org[0]), max(h + 2, org[1])
    cv2.rectangle(img, (x, y - h - 2), (x + w + 2, y + base), (0, 0, 0), -1)
    cv2.putText(img, text, (x + 1, y - 1), cv2.FONT_HERSHEY_SIMPLEX, scale, color, 1, cv2.LINE_AA)


def draw_app(img: np.ndarray, app: App, tracked: Detections, color_index: int) -> None:
    """Draw one app's overlay onto `img` (in place)."""
    color = PALETTE[color_index % len(PALETTE)]
    for zone in app.zones:
        pts = zone.polygon.astype(np.int32)
        cv2.polylines(img, [pts], True, color, 1, cv2.LINE_AA)
        occupancy = sum(zone.occupancy().values())
        _label(img, f"{zone.name}: {occupancy}", tuple(pts[0] + (3, 12)), color, 0.35)
    for k, line in enumerate(app.lines):
        a, b = line.a.astype(int), line.b.astype(int)
        cv2.line(img, tuple(a), tuple(b), color, 2, cv2.LINE_AA)
        text = f"{app.name}/{line.name} in {line.total.num_in} out {line.total.num_out}"
        _label(img, text, (int(b[0]) + 4, int(b[1]) + 14 + 14 * (color_index * 2 + k)), color)
    for (x0, y0, x1, y1), tid, cid in zip(tracked.xyxy.astype(int), tracked.tracker_id, tracked.class_id):
        cv2.rectangle(img, (x0, y0), (x1, y1), color, 1)
        _label(img, f"#{tid} {app.labels[cid]}", (x0, y0 - 1), color, 0.35)
    if app.frame_class is not None:  # a classifier's best class, top left, one row per app
        score = app.last_classes[0][1] if app.last_classes else 0.0
        _label(img, f"{app.name}: {app.frame_class} {score:.2f}", (4, 14 + 14 * color_index), color)
