"""When the global scheduler plans again: Nexus's epochs, as a function of time and rates.

The scheduler hears from its backends every beacon (how many requests each session
got) and plans the whole cluster again (cluster/placement.py) when an epoch is due:
every `epoch_s`; sooner, once at least `min_epoch_s` have passed since the last plan,
when a session's observed rate has left [`low`, `high`] times what the plan gave it
(a session that grows past its allocation would miss its SLO before the next epoch;
one that shrinks wastes devices), and has moved by at least `min_change_rps` (a
session of two requests a second, counted over a few seconds, reads a third off its
rate by chance alone, and would be planned again every time); and at once when a
backend is lost, so that its
sessions are placed again within a beacon. The caller passes the time: no clock is
read here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class EpochPolicy:
    beacon_s: float = 1.0
    epoch_s: float = 30.0
    min_epoch_s: float = 10.0
    low: float = 0.8
    high: float = 1.1
    min_change_rps: float = 1.0

    def __post_init__(self) -> None:
        for name in ("beacon_s", "epoch_s", "min_epoch_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be finite and > 0; was {value}")
        if not self.beacon_s <= self.min_epoch_s <= self.epoch_s:
            raise ValueError(f"need beacon_s <= min_epoch_s <= epoch_s; were {self.beacon_s}, "
                             f"{self.min_epoch_s}, {self.epoch_s}")
        if not (0 < self.low <= 1 <= self.high and math.isfinite(self.high)):
            raise ValueError(f"need 0 < low <= 1 <= high; were {self.low}, {self.high}")
        if not (math.isfinite(self.min_change_rps) and self.min_change_rps >= 0):
            raise ValueError(f"min_change_rps must be finite and >= 0; was {self.min_change_rps}")


class Epochs:
    def __init__(self, policy: EpochPolicy = EpochPolicy(), planned_at_s: float = 0.0) -> None:
        self.policy = policy
        self.planned_at_s = planned_at_s

    def due(self, now_s: float, observed_rps: Mapping[str, float], allocated_rps: Mapping[str, float],
            backend_lost: bool = False) -> str | None:
        """Why to plan again now ("backend_lost", "epoch", "rate: SESSION"), or None."""
        if backend_lost:
            return "backend_lost"
        since = now_s - self.planned_at_s
        if since >= self.policy.epoch_s:
            return "epoch"
        if since < self.policy.min_epoch_s:
            return None
        for session in sorted(set(observed_rps) | set(allocated_rps)):
            rate, allocated = observed_rps.get(session, 0.0), allocated_rps.get(session, 0.0)
            if allocated <= 0:
                if rate > 0:  # a session the plan has not seen yet
                    return f"rate: {session}"
                continue
            if not self.policy.low <= rate / allocated <= self.policy.high and \
                    abs(rate - allocated) >= self.policy.min_change_rps:
                return f"rate: {session}"
        return None

    def planned(self, now_s: float) -> None:
        self.planned_at_s = now_s
