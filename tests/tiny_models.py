"""Tiny models for engine tests, built by the python adapter (`factory: tiny_models:build`)."""

import torch
from torch import nn


class Tiny(nn.Module):
    """backbone: [B, 3, H, W] -> [B, 4, H/4, W/4]; heads a and b -> [B, 2]."""

    def __init__(self, config: dict) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 4, 4, 4), nn.ReLU())
        self.a = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, config.get("classes", 2)))
        self.b = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.backbone(x)
        return self.a(f)


def build(config: dict) -> Tiny:
    return Tiny(config)


class Chain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 2, 8, 8), nn.AdaptiveAvgPool2d(1), nn.Flatten())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)
