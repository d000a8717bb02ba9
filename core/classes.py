"""`Classes`: a classifier's answer for one image, the one type for it between the
engine, apps and gRPC (as `Detections` is for boxes)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Classes:
    probs: np.ndarray  # [C] float32: every class's probability (a softmax), indexed like the labels

    def __post_init__(self) -> None:
        object.__setattr__(self, "probs", np.asarray(self.probs, np.float32).reshape(-1))

    def __len__(self) -> int:
        return len(self.probs)

    def top(self, k: int, among: np.ndarray | None = None) -> list[tuple[int, float]]:
        """The k most probable classes, best first (ties by index): (class_id, probability).
        `among`: class ids to choose from (an app's classes); all when None."""
        ids = np.arange(len(self.probs)) if among is None else np.asarray(among, np.int64)
        order = ids[np.argsort(-self.probs[ids], kind="stable")][:k]
        return [(int(i), float(self.probs[i])) for i in order]
