"""Sampling parameters and the sampler: greedy (temperature 0), temperature, top-p,
with a per-request seed for reproducible sampling."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from llm.structured import Constraint

# Below this a temperature is greedy: dividing logits by 1e-300 overflows to inf and
# the softmax to NaN (vLLM draws the line at the same place).
GREEDY_BELOW = 1e-5
MAX_TEMPERATURE = 100.0


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 64
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False  # benchmarks: generate exactly max_tokens
    constraint: Constraint | None = None  # structured output (llm/structured.py)

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1; was {self.max_tokens}")
        if not (math.isfinite(self.temperature) and 0 <= self.temperature <= MAX_TEMPERATURE):
            raise ValueError(f"temperature must be in [0, {MAX_TEMPERATURE:g}]; was {self.temperature}")
        if not (math.isfinite(self.top_p) and 0 < self.top_p <= 1):
            raise ValueError(f"top_p must be in (0, 1]; was {self.top_p}")
        if any(not s for s in self.stop):
            raise ValueError("stop strings must not be empty")
        if self.constraint is not None and self.ignore_eos:
            raise ValueError("ignore_eos cannot be combined with a structured output, which ends where its "
                             "grammar does")

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW


def sample(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None = None) -> int:
    """logits [vocab] -> one token id. ValueError when the logits give no distribution
    (the caller fails that request alone)."""
    if params.greedy:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits.float() / params.temperature, dim=-1)
    if not bool(torch.isfinite(probs).all()):
        raise ValueError("sampling: the logits give no probability distribution (not finite)")
    if params.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        keep = torch.cumsum(sorted_probs, dim=-1) - sorted_probs < params.top_p
        keep[0] = True  # the likeliest token, however small top_p (5e-324 is 0 in float32)
        sorted_probs = sorted_probs * keep
        probs = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
    return int(torch.multinomial(probs, 1, generator=generator))
