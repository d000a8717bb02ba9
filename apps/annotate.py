"""Drawing app results on frames: boxes with track ids, lines with running counts,
zones with occupancy. Takes and returns RGB frames; one colour per app.

Several apps on one stream draw on one frame, often around one object (a person is a
person to one app and a moving blob to another), and people walk close together: a
label drawn where another already is would hide it. So the shapes of every app go
down first, then the labels, each at the first of its places (above its box, stacked
further up, inside the top of the box, below it) where it covers no label drawn
before; the first app's labels get the first places."""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from apps.app import App
from core.detections import Detections

PALETTE = [(255, 80, 80), (80, 200, 255), (120, 255, 120), (255, 200, 60), (220, 120, 255), (255, 255, 255)]
FONT = cv2.FONT_HERSHEY_SIMPLEX
LINE_SCALE, BOX_SCALE = 0.4, 0.35  # font scales of line and class labels, of box and zone labels
STACKED = 2  # places above a box beyond its first, before the inside of its top and below it are tried

Rect = tuple[int, int, int, int]  # x0, y0, x1, y1 pixels


class _Labels:
    """The labels of one frame, drawn where they cover none drawn before."""

    def __init__(self, img: np.ndarray) -> None:
        self.img = img
        self.taken: list[Rect] = []

    def draw(self, text: str, places: list[tuple[int, int]], color: tuple[int, int, int], scale: float) -> Rect:
        """Draw `text` at the first of `places` (its baseline's left end, moved into the
        frame) where it covers no label drawn before, else at the first; returns where."""
        (w, h), base = cv2.getTextSize(text, FONT, scale, 1)
        height, width = self.img.shape[:2]

        def rect(org: tuple[int, int]) -> Rect:
            x = min(max(0, org[0]), max(0, width - w - 2))
            y = min(max(h + 2, org[1]), max(h + 2, height - base))
            return x, y - h - 2, x + w + 2, y + base

        rects = [rect(org) for org in places]
        free = next((r for r in rects if not any(_overlap(r, t) for t in self.taken)), rects[0])
        self.taken.append(free)
        x0, y0, x1, y1 = free
        cv2.rectangle(self.img, (x0, y0), (x1, y1), (0, 0, 0), -1)
        cv2.putText(self.img, text, (x0 + 1, y1 - base - 1), FONT, scale, color, 1, cv2.LINE_AA)
        return free


def _overlap(a: Rect, b: Rect) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _box_places(x0: int, y0: int, y1: int, scale: float) -> list[tuple[int, int]]:
    """A box label's places, best first: above the box, stacked further up, inside its
    top, below it."""
    (_, h), base = cv2.getTextSize("#0", FONT, scale, 1)
    step = h + 2 + base  # one label's height
    above = [(x0, y0 - 1 - k * step) for k in range(STACKED + 1)]
    inside = [(x0 + 1, y0 + h + 3 + k * step) for k in range(2)]
    below = [(x0, y1 + h + 3 + k * step) for k in range(2)]
    return above + inside + below


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


def draw_overlays(img: np.ndarray, drawn: list[tuple[Overlay, int]]) -> list[Rect]:
    """Draw several apps' overlays onto `img` (in place), each (overlay, colour index):
    every app's shapes, then every label where it hides none drawn before. Returns where
    the labels went: each app's zones', lines', frame class's, then each app's boxes'."""
    for shown, color_index in drawn:
        color = PALETTE[color_index % len(PALETTE)]
        for pts, _ in shown.zones:
            cv2.polylines(img, [pts], True, color, 1, cv2.LINE_AA)
        for a, b, _ in shown.lines:
            cv2.line(img, a, b, color, 2, cv2.LINE_AA)
        for x0, y0, x1, y1, _ in shown.boxes:
            cv2.rectangle(img, (x0, y0), (x1, y1), color, 1)
    labels = _Labels(img)
    for shown, color_index in drawn:  # what stays put first: zones, lines, the frame's class
        color = PALETTE[color_index % len(PALETTE)]
        for pts, text in shown.zones:
            x, y = (int(v) for v in pts[0])
            labels.draw(text, [(x + 3, y + 12), (x + 3, y + 26), (x + 3, y - 4)], color, BOX_SCALE)
        for k, (a, b, text) in enumerate(shown.lines):
            org = (b[0] + 4, b[1] + 14 + 14 * (color_index * 2 + k))
            labels.draw(text, [org, (org[0], org[1] + 28), (a[0] + 4, a[1] - 4)], color, LINE_SCALE)
        if shown.frame_class is not None:  # top left, one row per app
            labels.draw(shown.frame_class, [(4, 14 + 14 * color_index)], color, LINE_SCALE)
    for shown, color_index in drawn:
        color = PALETTE[color_index % len(PALETTE)]
        for x0, y0, _, y1, text in shown.boxes:
            labels.draw(text, _box_places(x0, y0, y1, BOX_SCALE), color, BOX_SCALE)
    return labels.taken


def draw_overlay(img: np.ndarray, drawn: Overlay, color_index: int) -> None:
    """Draw one app's overlay onto `img` (in place)."""
    draw_overlays(img, [(drawn, color_index)])
