"""A torch root fragment with its image input step inside it.

Queued images are uint8 (`image_preprocess`); the fragment wants floats in [0, 1],
normalised if the model asks. As two eager operators before the traced call, each
would give up the GIL and wait to get it back: with many streams' threads busy, a lane
spends part of every backbone batch asleep that way (schedstat shows it). Inside the
module, the conversion is traced with the fragment and runs in C++ with the GIL
released, in the same single call.
"""

from __future__ import annotations

import torch
from torch import nn


class ImageInput(nn.Module):
    def __init__(self, inner: nn.Module, mean: tuple[float, ...] | None, std: tuple[float, ...] | None,
                 device: str) -> None:
        super().__init__()
        self.inner = inner
        self.normalise = mean is not None
        self.register_buffer("mean", torch.tensor(mean or (0.0, 0.0, 0.0), device=device).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(std or (1.0, 1.0, 1.0), device=device).view(1, 3, 1, 1))

    def forward(self, batch: torch.Tensor):
        x = batch.float().div(255.0)
        if self.normalise:
            x = (x - self.mean) / self.std
        return self.inner(x)
