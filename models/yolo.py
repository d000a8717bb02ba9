"""YOLO inputs and outputs, decoded as Ultralytics decodes them.

Input: `letterbox: [H, W]` keeps the frame's aspect ratio, scales it to fit (up or
down), centres it and pads with grey 114, as Ultralytics' `LetterBox` (linear
interpolation, the pad split with its -0.1/+0.1 rounding).

Outputs, per image:
- `yolo`: `[4 + C, N]` (v8, v11): centre x, centre y, width, height in network-input
  pixels, then C class scores in [0, 1];
- `yolov5`: `[N, 5 + C]`: the box, an objectness, then class scores (a class's
  confidence is its score times the objectness);
- `yolo_end2end`: `[N, 6]` (v10 and later NMS-free heads): x1, y1, x2, y2, score, class.

Candidates above `min_score` keep their best class; per-class NMS
(`torchvision.ops.batched_nms`, or across classes with `class_agnostic`) at `nms_iou`
keeps at most `max_detections`, best first; boxes go back to frame pixels through the
letterbox (or the plain resize) and are clipped to the frame. The defaults are
Ultralytics' predict defaults.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KINDS = ("yolo", "yolov5", "yolo_end2end")
PAD_VALUE = 114
MAX_NMS = 30000  # candidates that go into NMS, best first (Ultralytics' max_nms)


@dataclass(frozen=True)
class Letterbox:
    """How one frame was placed into the network input."""

    gain: float
    pad_x: int
    pad_y: int

    @classmethod
    def of(cls, frame_hw: tuple[int, int], input_hw: tuple[int, int]) -> "Letterbox":
        (h0, w0), (h, w) = frame_hw, input_hw
        gain = min(h / h0, w / w0)
        new_w, new_h = int(round(w0 * gain)), int(round(h0 * gain))
        return cls(gain, int(round((w - new_w) / 2 - 0.1)), int(round((h - new_h) / 2 - 0.1)))


def letterbox(frame: np.ndarray, input_hw: tuple[int, int]) -> np.ndarray:
    """[H0, W0, 3] uint8 -> [H, W, 3] uint8, resized to fit and padded with 114."""
    import cv2

    h0, w0 = frame.shape[:2]
    h, w = input_hw
    gain = min(h / h0, w / w0)
    new_w, new_h = int(round(w0 * gain)), int(round(h0 * gain))
    if (new_h, new_w) != (h0, w0):
        frame = cv2.resize(frame, (new_w, new_h), interpolation=cv2.INTER_LINEAR)
    dw, dh = (w - new_w) / 2, (h - new_h) / 2
    top, bottom = int(round(dh - 0.1)), int(round(dh + 0.1))
    left, right = int(round(dw - 0.1)), int(round(dw + 0.1))
    return cv2.copyMakeBorder(frame, top, bottom, left, right, cv2.BORDER_CONSTANT, value=(PAD_VALUE,) * 3)


@dataclass(frozen=True)
class Candidates:
    xyxy: "object"  # torch [K, 4] in network-input pixels
    score: "object"  # [K]
    cls: "object"  # [K] int64


class LayoutError(ValueError):
    """A YOLO output's shape does not fit its declared kind."""


def expected_layout(kind: str, num_classes: int) -> str:
    return {"yolo": f"[batch, 4 + {num_classes} classes, boxes]",
            "yolov5": f"[batch, boxes, 5 + {num_classes} classes]",
            "yolo_end2end": "[batch, boxes, 6] (x1, y1, x2, y2, score, class)"}[kind]


def check_layout(kind: str, shape: tuple[int, ...], num_classes: int) -> None:
    """One item's output shape (no batch dimension) against the kind and the labels."""
    if len(shape) != 2:
        raise LayoutError(f"a {kind} output is {expected_layout(kind, num_classes)}; one image's was {list(shape)}")
    width = {"yolo": shape[0], "yolov5": shape[1], "yolo_end2end": shape[1]}[kind]
    want = {"yolo": 4 + num_classes, "yolov5": 5 + num_classes, "yolo_end2end": 6}[kind]
    if width != want:
        raise LayoutError(f"a {kind} output with {num_classes} labels is {expected_layout(kind, num_classes)}; "
                          f"one image's was {list(shape)}")


def candidates(kind: str, out, min_score: float) -> Candidates:
    """One image's raw output -> boxes above `min_score` with their best class."""
    import torch

    out = out.float()
    if kind == "yolo_end2end":
        keep = out[:, 4] > min_score
        return Candidates(out[keep, :4], out[keep, 4], out[keep, 5].round().long())
    if kind == "yolo":
        rows = out.transpose(0, 1)  # [N, 4 + C]
        score, cls = rows[:, 4:].max(1)
    else:  # yolov5: objectness first, then class score times objectness
        rows = out[out[:, 4] > min_score]
        score, cls = (rows[:, 5:] * rows[:, 4:5]).max(1)
    keep = score > min_score
    box = rows[keep, :4]
    xyxy = torch.cat([box[:, :2] - box[:, 2:] / 2, box[:, :2] + box[:, 2:] / 2], 1)
    return Candidates(xyxy, score[keep], cls[keep])


def suppress(kind: str, c: Candidates, nms_iou: float, max_detections: int, class_agnostic: bool) -> Candidates:
    from torchvision.ops import batched_nms, nms

    order = c.score.argsort(descending=True)
    if kind == "yolo_end2end":  # the head has already chosen
        keep = order[:max_detections]
    else:
        order = order[:MAX_NMS]
        xyxy, score, cls = c.xyxy[order], c.score[order], c.cls[order]
        kept = nms(xyxy, score, nms_iou) if class_agnostic else batched_nms(xyxy, score, cls, nms_iou)
        keep = order[kept[:max_detections]]
    return Candidates(c.xyxy[keep], c.score[keep], c.cls[keep])


def to_frame(xyxy: np.ndarray, frame_wh: tuple[int, int], input_hw: tuple[int, int] | None,
             letterboxed: bool) -> np.ndarray:
    """Network-input pixels -> frame pixels, clipped to the frame."""
    width, height = frame_wh
    xyxy = xyxy.astype(np.float32).copy()
    if input_hw is not None and letterboxed:
        box = Letterbox.of((height, width), input_hw)
        xyxy[:, [0, 2]] -= box.pad_x
        xyxy[:, [1, 3]] -= box.pad_y
        xyxy /= box.gain
    elif input_hw is not None:
        xyxy[:, [0, 2]] *= width / input_hw[1]
        xyxy[:, [1, 3]] *= height / input_hw[0]
    xyxy[:, [0, 2]] = xyxy[:, [0, 2]].clip(0, width)
    xyxy[:, [1, 3]] = xyxy[:, [1, 3]].clip(0, height)
    return xyxy
