"""Decoding a leaf's output into Detections in frame pixels, by the output kind
model.yaml declares, and checking that an output has that kind's layout."""

from __future__ import annotations

from typing import Any

import numpy as np

from core.detections import Detections
from models.preprocess import input_hw
from models.repository import DENSE_KINDS, YOLO_KINDS, ModelSpec


def yolo_detections(spec: ModelSpec, output: Any, frame_size: tuple[int, int]) -> Detections:
    """One image's YOLO output -> Detections in frame pixels (models/yolo.py)."""
    from models import yolo

    post = spec.postprocess
    found = yolo.suppress(spec.output, yolo.candidates(spec.output, output.cpu(), post.min_score),
                          post.nms_iou, post.max_detections, post.class_agnostic)
    known = (found.cls >= 0) & (found.cls < len(spec.labels))  # an end2end class outside the labels is not ours
    xyxy = yolo.to_frame(found.xyxy[known].numpy(), frame_size, input_hw(spec, frame_size),
                         spec.input.letterbox is not None)
    return Detections(xyxy, found.score[known].numpy(), found.cls[known].numpy())


def dense_detections(spec: ModelSpec, outputs: list[dict], frame_sizes: list[tuple[int, int]]) -> list[Detections]:
    """Items' dense outputs (models/anchor_free.py) -> Detections in frame pixels, decoded
    as one batch, then suppressed item by item as YOLO's."""
    import torch

    from models import anchor_free, yolo

    post, hw = spec.postprocess, spec.input.size
    batch = {k: torch.stack([o[k] for o in outputs]) for k in outputs[0]}
    if spec.output == "centernet_ltrb":
        found = anchor_free.centernet_ltrb(batch["heatmap"], batch["ltrb"], hw, post.min_score)
    else:
        found = anchor_free.gfl(anchor_free.gfl_levels(batch, len(spec.labels)), hw, post.min_score)
    out = []
    for candidates, size in zip(found, frame_sizes):
        kept = yolo.suppress("yolo", candidates, post.nms_iou, post.max_detections, post.class_agnostic)
        out.append(Detections(yolo.to_frame(kept.xyxy.cpu().numpy(), size, hw, False), kept.score.cpu().numpy(),
                              kept.cls.cpu().numpy()))
    return out


def named_detections(spec: ModelSpec, output: dict, frame_size: tuple[int, int]) -> Detections:
    """One image's named outputs (boxes in input pixels, scores, labels) -> Detections."""
    from models.yolo import to_frame

    scores = output["scores"].float().cpu().numpy().reshape(-1)
    labels = output["labels"].cpu().numpy().astype(np.int64).reshape(-1)
    boxes = output["boxes"].float().cpu().numpy().reshape(-1, 4)
    keep = scores >= spec.postprocess.min_score
    xyxy = to_frame(boxes[keep], frame_size, input_hw(spec, frame_size), spec.input.letterbox is not None)
    return Detections(xyxy, scores[keep], labels[keep])


CHECKED_KINDS = ("classification", "centernet", *YOLO_KINDS, *DENSE_KINDS)  # outputs whose layout is checked at load


CENTERNET_KEYS = {"heatmap", "offset", "size"}


def check_output(spec: ModelSpec, output: Any) -> None:
    """One item's output against the declared kind; OutputMismatch names both."""
    if spec.output == "classification":
        shape = tuple(getattr(output, "shape", ()))
        classes = shape[-1] if shape else None
        if len(shape) != 1 or (spec.labels and classes != len(spec.labels)):
            want = f"[{len(spec.labels)} classes]" if spec.labels else "[classes]"
            raise OutputMismatch(f"a classification output is {want} per image (the labels name "
                                 f"{len(spec.labels)}); one image's was {list(shape)}")
    elif spec.output == "centernet":
        if not isinstance(output, dict) or set(output) != CENTERNET_KEYS:
            raise OutputMismatch(f"a centernet output is a dict of {sorted(CENTERNET_KEYS)} per head; was "
                                 f"{_keys_of(output)}")
    elif spec.output == "centernet_ltrb":
        if not isinstance(output, dict) or set(output) != {"heatmap", "ltrb"}:
            raise OutputMismatch(f"a centernet_ltrb output is a dict of ['heatmap', 'ltrb']; was {_keys_of(output)}")
        heat, ltrb = output["heatmap"].shape, output["ltrb"].shape
        if len(heat) != 3 or heat[-1] != len(spec.labels) or tuple(ltrb) != (*heat[:2], 4):
            raise OutputMismatch(f"a centernet_ltrb output is heatmap [h, w, {len(spec.labels)} classes] and ltrb "
                                 f"[h, w, 4]; were {list(heat)} and {list(ltrb)}")
    elif spec.output == "gfl":
        from models.anchor_free import gfl_levels

        if not isinstance(output, dict):
            raise OutputMismatch(f"a gfl output is a dict of named outputs; was {type(output).__name__}")
        try:
            gfl_levels({k: v.unsqueeze(0) for k, v in output.items()}, len(spec.labels))
        except ValueError as exc:
            raise OutputMismatch(str(exc)) from None
    elif spec.output in YOLO_KINDS:
        from models.yolo import LayoutError, check_layout

        shape = tuple(getattr(output, "shape", ()))
        try:
            check_layout(spec.output, shape, len(spec.labels))
        except LayoutError as exc:
            raise OutputMismatch(str(exc)) from None


def _keys_of(output: Any) -> Any:
    """What an output was, for a mismatch's message: its keys, or its type."""
    return sorted(output) if isinstance(output, dict) else type(output).__name__


class OutputMismatch(ValueError):
    """A model's output does not have the layout its `output:` kind declares."""


def _scale_for(spec: ModelSpec, frame_size: tuple[int, int]) -> float:
    if spec.input.scale is not None:
        return spec.input.scale
    return 1.0


def centernet_detections(spec: ModelSpec, leaf: str, outputs: list[dict], frame_size: tuple[int, int]) -> list[Detections]:
    """Items of one frame size and one head's output shapes -> Detections in frame pixels."""
    import torch

    from models.scenedet import decode as peaks

    head = {k: torch.stack([o[k] for o in outputs]).float().cpu() for k in outputs[0]}
    width, height = frame_size
    label_ids = np.array([spec.labels.index(n) for n in spec.heads[leaf]], np.int64)
    found = []
    for xyxy, score, cls in peaks(head, _scale_for(spec, frame_size), min_score=0.05):
        xyxy[:, [0, 2]] = xyxy[:, [0, 2]].clip(0, width - 1)
        xyxy[:, [1, 3]] = xyxy[:, [1, 3]].clip(0, height - 1)
        found.append(Detections(xyxy, score, label_ids[cls]))
    return found
