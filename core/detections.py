"""`Detections`: the one type for boxes between the engine, trackers, counters and
annotators. Parallel arrays, validated at construction, indexable by a boolean mask
or an index array, as supervision's `Detections` are.

`data` holds per-box extras (an embedding [N, D], a track's colour [N, 3], a mask
[N, H, W]), as supervision's `Detections.data` does: every array's first dimension is
N, and each goes wherever its boxes go (indexing, `with_tracker_id`, `concat`), so a
stage that selects or reorders boxes never leaves their extras behind or misaligned.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Detections:
    xyxy: np.ndarray  # [N, 4] float32 pixels
    confidence: np.ndarray  # [N] float32
    class_id: np.ndarray  # [N] int64, index into the producer's labels
    tracker_id: np.ndarray = field(default=None)  # [N] int64; -1 = not tracked
    data: dict[str, np.ndarray] = field(default_factory=dict)  # name -> [N, ...] per-box extras

    def __post_init__(self) -> None:
        xyxy = np.asarray(self.xyxy, np.float32).reshape(-1, 4)
        n = len(xyxy)
        object.__setattr__(self, "xyxy", xyxy)
        object.__setattr__(self, "confidence", np.asarray(self.confidence, np.float32).reshape(-1))
        object.__setattr__(self, "class_id", np.asarray(self.class_id, np.int64).reshape(-1))
        tracker_id = np.full(n, -1, np.int64) if self.tracker_id is None else self.tracker_id
        object.__setattr__(self, "tracker_id", np.asarray(tracker_id, np.int64).reshape(-1))
        for name in ("confidence", "class_id", "tracker_id"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"Detections.{name} has {len(getattr(self, name))} entries; xyxy has {n}")
        data = {key: np.asarray(value) for key, value in (self.data or {}).items()}  # a copy: the caller's may change
        for key, value in data.items():
            if value.ndim == 0 or len(value) != n:
                raise ValueError(f"Detections.data[{key!r}] must have one entry per box along its first "
                                 f"dimension; has shape {value.shape}, and xyxy has {n} boxes")
        object.__setattr__(self, "data", data)

    @classmethod
    def empty(cls) -> "Detections":
        return cls(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int64))

    def __len__(self) -> int:
        return len(self.xyxy)

    def __getitem__(self, index: np.ndarray | slice | list | int) -> "Detections":
        if isinstance(index, (int, np.integer)):
            index = [index]  # one box is still [1, ...]: the extras keep their first dimension
        return Detections(self.xyxy[index], self.confidence[index], self.class_id[index], self.tracker_id[index],
                          {key: value[index] for key, value in self.data.items()})

    @property
    def centers(self) -> np.ndarray:
        """[N, 2] box centres."""
        return (self.xyxy[:, :2] + self.xyxy[:, 2:]) / 2

    @property
    def bottom_centers(self) -> np.ndarray:
        """[N, 2] foot points: bottom centre of each box."""
        return np.stack([(self.xyxy[:, 0] + self.xyxy[:, 2]) / 2, self.xyxy[:, 3]], axis=1)

    @property
    def area(self) -> np.ndarray:
        return (self.xyxy[:, 2] - self.xyxy[:, 0]).clip(0) * (self.xyxy[:, 3] - self.xyxy[:, 1]).clip(0)

    def with_tracker_id(self, tracker_id: np.ndarray) -> "Detections":
        return Detections(self.xyxy, self.confidence, self.class_id, tracker_id, self.data)

    @staticmethod
    def concat(parts: list["Detections"]) -> "Detections":
        """The parts' boxes one after another. Empty parts are left out, so an empty
        part's `data` keys do not matter; the others must all have the same keys."""
        parts = [p for p in parts if len(p)]
        if not parts:
            return Detections.empty()
        keys = set(parts[0].data)
        for k, p in enumerate(parts[1:], 1):
            if set(p.data) != keys:
                raise ValueError(f"Detections.concat: every non-empty part needs the same data keys; the first has "
                                 f"{sorted(keys)}, non-empty part {k} has {sorted(p.data)}")
        return Detections(np.concatenate([p.xyxy for p in parts]), np.concatenate([p.confidence for p in parts]),
                          np.concatenate([p.class_id for p in parts]), np.concatenate([p.tracker_id for p in parts]),
                          {key: np.concatenate([p.data[key] for p in parts]) for key in parts[0].data})
