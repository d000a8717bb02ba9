"""Frames into a model's input: resized, letterboxed or padded on the host, then made
floats (normalised where the model asks) when a batch is formed."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from models.repository import ModelSpec


def image_preprocess(spec: ModelSpec, device: str) -> Callable[[np.ndarray], list[Any]]:
    """Frames [N, H, W, 3] uint8 RGB -> per-frame [3, h, w] uint8 tensors on the device:
    resized (and padded with `scale` or the frame's own size), letterboxed, or resized
    to a fixed size, in the channel order the model expects. They stay 8-bit until a
    batch is formed (`image_input`): a quarter of the memory in queues and of the bytes
    sent to a GPU."""
    import cv2
    import torch

    inp = spec.input

    def run(frames: np.ndarray) -> list[Any]:
        n, height, width, _ = frames.shape
        if inp.letterbox is not None:
            from models.yolo import letterbox

            out = np.stack([letterbox(frames[i], inp.letterbox) for i in range(n)])
        else:
            if inp.size is not None:
                h, w = inp.size
                ph, pw = h, w  # a fixed input is never padded
            else:
                h, w = (int(round(height * inp.scale)), int(round(width * inp.scale))) if inp.scale is not None \
                    else (height, width)
                ph, pw = -(-h // inp.pad_to) * inp.pad_to, -(-w // inp.pad_to) * inp.pad_to
            out = np.zeros((n, ph, pw, 3), np.uint8)
            for i in range(n):
                out[i, :h, :w] = frames[i] if (h, w) == (height, width) else \
                    cv2.resize(frames[i], (w, h), interpolation=cv2.INTER_AREA)
        if inp.color == "bgr":
            out = np.ascontiguousarray(out[..., ::-1])
        return list(torch.from_numpy(out).to(device).permute(0, 3, 1, 2).unbind(0))

    return run


def input_hw(spec: ModelSpec, frame_size: tuple[int, int]) -> tuple[int, int] | None:
    """[height, width] the frame was resized to before any padding (None: its own)."""
    inp = spec.input
    if inp.letterbox is not None:
        return inp.letterbox
    if inp.size is not None:
        return inp.size
    if inp.scale is not None:
        return int(round(frame_size[1] * inp.scale)), int(round(frame_size[0] * inp.scale))
    return None


def image_input(spec: ModelSpec, device: str, run: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Wrap a root fragment: a uint8 batch becomes floats in [0, 1], normalised if the
    model asks, in one vectorised step on the device."""
    import torch

    inp = spec.input
    mean = torch.tensor(inp.mean, device=device).view(1, 3, 1, 1) if inp.mean else None
    std = torch.tensor(inp.std, device=device).view(1, 3, 1, 1) if inp.std else None

    def wrapped(batch):
        x = batch.float().div_(255.0)
        if mean is not None:
            x = (x - mean) / std
        return run(x)

    return wrapped
