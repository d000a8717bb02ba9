"""Drawing app results on frames: boxes with track ids, lines with running counts,
zones with occupancy. Takes and returns RGB frames; one colour per app."""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from apps.app import App
from core.detections import Detections

PALETTE = [(255, 80, 80), (80, 200, 255), (120, 255, 120), (255, 200, 60), (220, 120, 255), (255, 255, 255)]


def _label(img: np.ndarray, text: str, org: tuple[int, int], color: tuple[int, int, int], scale: float = 0.4) -> None:
    (w, h), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, 1)
    x, y = max(0, org[0]), max(h + 2, org[1])
    cv2.rectangle(img, (x, y - h - 2), (x + w + 2, y + base), (0, 0, 0), -1)
    cv2.putText(img, text, (x + 1, y - 1), cv2.FONT_HERSHEY_SIMPLEX, scale, color, 1, cv2.LINE_AA)


@dataclass(frozen=True)
class Overlay:
    """What `draw_overlay` draws for one app, copied out of the app when the frame was
    seen: it can be drawn later, on another thread, while the app goes on counting."""

    zones: tuple[tuple[np.ndarray, str], ...]  # (polygon as int32 points, label)
    lines: tuple[tuple[tuple[int, int], tuple[int, int], str], ...]  # (a, b, label)
    boxes: tuple[tuple[int, int, int, int, str], ...]  # (x0, y0, x1, y1, label)
    frame_class: str | None  # a classifier's best class, with its score


def overlay(app: App, tracked: Detections) -> Overlay:
    zones = tuple((zone.polygon.astype(np.int32), f"{zone.name}: {sum(zone.occupancy().values())}")
                  for zone in app.zones)
    lines = tuple((tuple(line.a.astype(int).tolist()), tuple(line.b.astype(int).tolist()),
                   f"{app.name}/{line.name} in {line.total.num_in} out {line.total.num_out}") for line in app.lines)
    boxes = tuple((x0, y0, x1, y1, f"#{tid} {app.labels[cid]}") for (x0, y0, x1, y1), tid, cid
                  in zip(tracked.xyxy.astype(int).tolist(), tracked.tracker_id.tolist(), tracked.class_id.tolist()))
    frame_class = None
    if app.frame_class is not None:
        score = app.last_classes[0][1] if app.last_classes else 0.0
        frame_class = f"{app.name}: {app.frame_class} {score:.2f}"
    return Overlay(zones, lines, boxes, frame_class)


def draw_overlay(img: np.ndarray, drawn: Overlay, color_index: int) -> None:
    """Draw one app's overlay onto `img` (in place)."""
    color = PALETTE[color_index % len(PALETTE)]
    for pts, text in drawn.zones:
        cv2.polylines(img, [pts], True, color, 1, cv2.LINE_AA)
        _label(img, text, tuple(pts[0] + (3, 12)), color, 0.35)
    for k, (a, b, text) in enumerate(drawn.lines):
        cv2.line(img, a, b, color, 2, cv2.LINE_AA)
        _label(img, text, (b[0] + 4, b[1] + 14 + 14 * (color_index * 2 + k)), color)
    for x0, y0, x1, y1, text in drawn.boxes:
        cv2.rectangle(img, (x0, y0), (x1, y1), color, 1)
        _label(img, text, (x0, y0 - 1), color, 0.35)
    if drawn.frame_class is not None:  # top left, one row per app
        _label(img, drawn.frame_class, (4, 14 + 14 * color_index), color)


def draw_app(img: np.ndarray, app: App, tracked: Detections, color_index: int) -> None:
    """Draw one app's overlay onto `img` (in place)."""
    draw_overlay(img, overlay(app, tracked), color_index)
