"""What crosses the engine's boundary: a `Request` in, a `Result` or `Dropped` out.

Plain data, so the same types serve an engine in this process and one behind a
cluster actor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Hashable

import numpy as np

from core.classes import Classes
from core.detections import Detections

ADAPTIVE = "adaptive"  # Request.version: let the engine choose by load


class Dropped(Exception):
    """The engine gave up on a request; `reason` says why (deadline, overloaded, error, ...).
    `selected`: the adaptive-selection switch this request saw, as on a Result."""

    def __init__(self, reason: str, detail: str = "", selected: dict | None = None) -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.selected = selected


@dataclass(frozen=True)
class Request:
    app: str
    model: str
    image: np.ndarray  # [H, W, 3] uint8 RGB
    capture_ms: float  # deadline = capture_ms + slo_ms
    slo_ms: float
    version: int | str | None = None  # number, label, "adaptive", or None for the latest
    priority: int = 0
    labels: tuple[str, ...] | None = None  # which heads; all when None
    input_key: Hashable | None = None  # equal keys are the same input (computed once)
    # False: never dropped for its deadline (an offline run, which waits instead);
    # latency is still measured against slo_ms
    may_drop: bool = True


@dataclass
class Result:
    app: str
    model: str
    version: int
    outputs: dict[str, Any]  # leaf fragment -> Detections, Classes or array
    latency_ms: float
    within_slo: bool
    # the adaptive-selection switch this request saw ({app, model, from_version,
    # to_version, rate_per_s, t_ms}), so the caller that owns the app reports it
    selected: dict | None = None

    @property
    def detections(self) -> Detections:
        return Detections.concat([o for o in self.outputs.values() if isinstance(o, Detections)])

    @property
    def classes(self) -> Classes | None:
        """A classifier's answer (its first leaf that gives one); None for other models."""
        return next((o for o in self.outputs.values() if isinstance(o, Classes)), None)
