"""SceneDet: a small anchor-free (CenterNet-style) detector family for street scenes.

Layout, chosen so the engine can split it into fragments:

    backbone       image [B, 3, H, W] -> features [B, C, H/4, W/4]   (shared by every task)
    person_head    features -> {"heatmap": [B, 1, h, w], "size": [B, 2, h, w], "offset": [B, 2, h, w]}
    vehicle_head   features -> same, with 2 heatmap channels (car, bike)

Each head predicts, per output cell, a class heatmap (object centres), the box size as
log(width, height) in cells, and the sub-cell offset of the centre. Decoding keeps
local maxima of the heatmap (3x3 max-pool), so no box NMS is needed.

Input images are RGB in [0, 1], normalised inside the model (so a fragment's input is
plain pixels), with H and W multiples of 32. `preprocess` resizes a frame by the
model's `input_scale` and pads it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

TASKS = {"person": ("person",), "vehicle": ("car", "bike")}
STRIDE = 4  # output cell size in model-input pixels


@dataclass(frozen=True)
class SceneDetConfig:
    widths: tuple[int, int, int, int] = (16, 32, 64, 96)  # stem, stride 4, 8, 16
    blocks: tuple[int, int, int] = (1, 1, 1)  # residual blocks at stride 4, 8, 16
    neck: int = 48  # feature channels the heads see
    head: int = 48
    input_scale: float = 0.5  # frame -> model input resize factor

    @classmethod
    def from_dict(cls, d: dict) -> "SceneDetConfig":
        return cls(widths=tuple(d.get("widths", cls.widths)), blocks=tuple(d.get("blocks", cls.blocks)),
                   neck=int(d.get("neck", cls.neck)), head=int(d.get("head", cls.head)),
                   input_scale=float(d.get("input_scale", cls.input_scale)))

    def to_dict(self) -> dict:
        return {"widths": list(self.widths), "blocks": list(self.blocks), "neck": self.neck,
                "head": self.head, "input_scale": self.input_scale}


def conv_bn(cin: int, cout: int, stride: int = 1, k: int = 3) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True))


class Residual(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv1 = conv_bn(c, c)
        self.conv2 = nn.Sequential(nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x + self.conv2(self.conv1(x)))


class Backbone(nn.Module):
    """Strided residual stages and a small top-down neck back to stride 4."""

    def __init__(self, cfg: SceneDetConfig) -> None:
        super().__init__()
        w0, w1, w2, w3 = cfg.widths
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))
        self.stem = nn.Sequential(conv_bn(3, w0, 2), conv_bn(w0, w0))
        self.stage1 = nn.Sequential(conv_bn(w0, w1, 2), *[Residual(w1) for _ in range(cfg.blocks[0])])
        self.stage2 = nn.Sequential(conv_bn(w1, w2, 2), *[Residual(w2) for _ in range(cfg.blocks[1])])
        self.stage3 = nn.Sequential(conv_bn(w2, w3, 2), *[Residual(w3) for _ in range(cfg.blocks[2])])
        self.lat3 = nn.Conv2d(w3, cfg.neck, 1)
        self.lat2 = nn.Conv2d(w2, cfg.neck, 1)
        self.lat1 = nn.Conv2d(w1, cfg.neck, 1)
        self.smooth = conv_bn(cfg.neck, cfg.neck)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = (images - self.mean) / self.std
        c1 = self.stage1(self.stem(x))  # stride 4
        c2 = self.stage2(c1)  # stride 8
        c3 = self.stage3(c2)  # stride 16
        p = self.lat3(c3)
        p = F.interpolate(p, size=c2.shape[-2:], mode="nearest") + self.lat2(c2)
        p = F.interpolate(p, size=c1.shape[-2:], mode="nearest") + self.lat1(c1)
        return self.smooth(p)


class Head(nn.Module):
    def __init__(self, cin: int, width: int, num_classes: int) -> None:
        super().__init__()
        self.trunk = conv_bn(cin, width)
        self.heatmap = nn.Conv2d(width, num_classes, 1)
        self.size = nn.Conv2d(width, 2, 1)
        self.offset = nn.Conv2d(width, 2, 1)
        nn.init.constant_(self.heatmap.bias, -2.19)  # prior 0.1: stable focal-loss start

    def forward(self, features: torch.Tensor) -> dict[str, torch.Tensor]:
        t = self.trunk(features)
        return {"heatmap": self.heatmap(t), "size": self.size(t), "offset": self.offset(t)}


class SceneDet(nn.Module):
    def __init__(self, cfg: SceneDetConfig = SceneDetConfig()) -> None:
        super().__init__()
        self.cfg = cfg
        self.backbone = Backbone(cfg)
        self.person_head = Head(cfg.neck, cfg.head, len(TASKS["person"]))
        self.vehicle_head = Head(cfg.neck, cfg.head, len(TASKS["vehicle"]))

    def forward(self, images: torch.Tensor) -> dict[str, dict[str, torch.Tensor]]:
        features = self.backbone(images)
        return {"person": self.person_head(features), "vehicle": self.vehicle_head(features)}


def build(config: dict | None = None) -> SceneDet:
    """Factory for the model repository (`factory: models.scenedet:build`)."""
    return SceneDet(SceneDetConfig.from_dict(config or {}))


# -- pre- and post-processing ---------------------------------------------------------
def input_size(frame_size: tuple[int, int], scale: float) -> tuple[int, int, int, int]:
    """(resized_w, resized_h, padded_w, padded_h) for a (width, height) frame."""
    w, h = int(round(frame_size[0] * scale)), int(round(frame_size[1] * scale))
    return w, h, (w + 31) // 32 * 32, (h + 31) // 32 * 32


def preprocess(frames: np.ndarray, scale: float) -> torch.Tensor:
    """[N, H, W, 3] uint8 RGB -> [N, 3, h, w] float in [0, 1], resized and zero-padded."""
    import cv2

    n, height, width, _ = frames.shape
    w, h, pw, ph = input_size((width, height), scale)
    out = np.zeros((n, ph, pw, 3), np.uint8)
    for i in range(n):
        out[i, :h, :w] = cv2.resize(frames[i], (w, h), interpolation=cv2.INTER_AREA) if scale != 1 else frames[i]
    return torch.from_numpy(out).permute(0, 3, 1, 2).float().div_(255.0)


@torch.no_grad()
def decode(head_out: dict[str, torch.Tensor], scale: float, max_objects: int = 100,
           min_score: float = 0.05) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per image: (xyxy [K, 4] in frame pixels, score [K], class index within the head [K])."""
    heat = torch.sigmoid(head_out["heatmap"])
    peaks = heat * (F.max_pool2d(heat, 3, 1, 1) == heat)
    b, c, h, w = heat.shape
    scores, idx = peaks.reshape(b, -1).topk(min(max_objects, c * h * w))
    results = []
    for i in range(b):
        keep = scores[i] >= min_score
        s, k = scores[i][keep], idx[i][keep]
        cls = k // (h * w)
        cell = k % (h * w)
        ys, xs = (cell // w).float(), (cell % w).float()
        off = head_out["offset"][i].reshape(2, -1)[:, cell]
        size = head_out["size"][i].reshape(2, -1)[:, cell].clamp(-3, 6).exp()
        cx, cy = (xs + off[0]) * STRIDE, (ys + off[1]) * STRIDE
        bw, bh = size[0] * STRIDE, size[1] * STRIDE
        xyxy = torch.stack([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2], dim=1) / scale
        results.append((xyxy.numpy().astype(np.float32), s.numpy().astype(np.float32), cls.numpy().astype(np.int64)))
    return results
