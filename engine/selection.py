"""Adaptive model selection (Clipper): the most accurate version the load allows.

A request with `version="adaptive"` lets the engine choose among the model's loaded
versions. The choice is a pure function of each version's quality (its model.yaml
`quality`, e.g. held-out mAP; else the version number), its capacity within the SLO
(Nexus: the best b / l(b) with 2 l(b) <= SLO over its fragments' profiles), the
model's recent request rate, and the version chosen last. Hysteresis keeps it from
flapping: a version is left only when the rate passes `down_margin` of its capacity,
and a better one is taken only when the rate is below `up_margin` of that one's.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from engine.profiles import Profile


@dataclass(frozen=True)
class VersionCost:
    version: int
    quality: float
    capacity_per_s: float


def capacity(profiles: list[Profile], slo_ms: float, host_ms: float = 0.0) -> float:
    """Items per second a version sustains within the SLO, waiting one batch at most;
    `host_ms` per item (pre- and postprocessing) counts as if it were serial."""
    best = 0.0
    for b in range(1, max(p.max_batch for p in profiles) + 1):
        latency = sum(p.latency_ms(b) for p in profiles) + b * host_ms
        if 2 * latency <= slo_ms:
            best = max(best, b * 1000.0 / latency)
    return best


def choose_version(options: list[VersionCost], rate_per_s: float, current: int | None,
                   up_margin: float = 0.7, down_margin: float = 0.9) -> int:
    if not options:
        raise ValueError("no versions to choose from")
    by_quality = sorted(options, key=lambda o: (-o.quality, -o.version))
    fastest = max(options, key=lambda o: o.capacity_per_s)
    candidate = next((o for o in by_quality if rate_per_s <= up_margin * o.capacity_per_s), fastest)
    kept = next((o for o in options if o.version == current), None)
    if kept is not None and rate_per_s <= down_margin * kept.capacity_per_s and kept.quality >= candidate.quality:
        return kept.version
    return candidate.version


@dataclass
class RateMeter:
    """Exponentially decaying count of arrivals: a rate with time constant tau."""

    tau_ms: float = 1000.0
    _value: float = 0.0
    _last_ms: float | None = None

    def add(self, now_ms: float, n: int = 1) -> float:
        if self._last_ms is not None:
            self._value *= math.exp(-max(0.0, now_ms - self._last_ms) / self.tau_ms)
        self._last_ms = now_ms
        self._value += n
        return self.rate_per_s

    @property
    def rate_per_s(self) -> float:
        """As of the last arrival."""
        return self._value * 1000.0 / self.tau_ms

    def rate_at(self, now_ms: float) -> float:
        """Decayed to `now_ms`: a pause in arrivals lowers it."""
        if self._last_ms is None:
            return 0.0
        return self.rate_per_s * math.exp(-max(0.0, now_ms - self._last_ms) / self.tau_ms)


class AdaptiveSelector:
    """Per (app, model), the version chosen last and each switch; per model, the rate.
    Called under the engine's lock."""

    def __init__(self, clock) -> None:
        self.clock = clock
        self._rates: dict[str, RateMeter] = {}
        self._chosen: dict[tuple[str, str], int] = {}
        self.switches: deque[dict] = deque(maxlen=10_000)  # every switch, for reports and benches

    def choose(self, app: str, model: str, options: list[VersionCost]) -> tuple[int, dict | None]:
        """The version for this request, and the switch it makes (None: the app stays)."""
        rate = self._rates.setdefault(model, RateMeter()).add(self.clock())
        key = (app, model)
        current = self._chosen.get(key)
        chosen = choose_version(options, rate, current)
        if chosen == current:
            return chosen, None
        self._chosen[key] = chosen
        switch = {"type": "model_selected", "app": app, "model": model, "from_version": current,
                  "to_version": chosen, "rate_per_s": round(rate, 2), "t_ms": round(self.clock(), 1)}
        self.switches.append(switch)
        return chosen, switch
