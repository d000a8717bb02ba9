"""Profiles as serving sees them: the stored l(b) scaled by what batches take now.

Profiles are measured on an idle device; under load (host threads, other processes)
batches run slower, and less evenly. Each session keeps the observed/profiled latency
ratio (mean and variance, EWMA), and plans use the stored profile scaled by the mean
plus two standard deviations (plan for the slow batches too). A slowdown is learnt
only from batches that run, so it fades back to the profile while the session runs
nothing: a session whose every request is dropped as hopeless under a slow spell
would otherwise never learn that the spell has passed. Per model, the host work of a
request (pre- and postprocessing) is kept too: it counts against deadlines and
capacity. Called under the engine's lock, or by one thread per key.
"""

from __future__ import annotations

import math
from typing import Callable

from engine.profiles import Profile

SLOWDOWN_FADE_MS = 3000.0  # the time constant of the fade while a session runs nothing
# how far one batch may move the slowdown: wide enough that a profile measured on a
# busy machine (2-3x slow, engine/machine_load.py) is corrected by what batches take
RATIO_MIN, RATIO_MAX = 0.2, 4.0
FACTOR_STEP = 0.01  # plans scale profiles by the factor rounded to this


class ObservedProfiles:
    def __init__(self, clock: Callable[[], float], adapt: bool = True) -> None:
        """`adapt=False`: plan with the stored profiles as they are."""
        self.clock = clock
        self.adapt = adapt
        self.slowdown: dict[str, tuple[float, float, float]] = {}  # session -> (mean, variance, when)
        self.host: dict[str, float] = {}  # model -> host ms per request
        # session -> (stored, rounded factor, scaled): the factor moves with every batch
        # and admission asks for every request, while a new Profile costs ~9 us (its
        # latencies at every batch size); rounding lets one serve until the factor moves
        self._scaled: dict[str, tuple[Profile, float, Profile]] = {}

    def current(self, session: str, stored: Profile) -> Profile:
        mean, var = self.slowed(session)
        factor = mean + 2.0 * var ** 0.5
        if abs(factor - 1.0) < 0.02:
            return stored
        rounded = round(factor / FACTOR_STEP) * FACTOR_STEP
        cached = self._scaled.get(session)
        if cached is None or cached[0] is not stored or cached[1] != rounded:
            cached = (stored, rounded, stored.scaled(rounded))
            self._scaled[session] = cached
        return cached[2]

    def slowed(self, session: str) -> tuple[float, float]:
        """The observed/profiled latency ratio (mean, variance), faded to now."""
        mean, var, at = self.slowdown.get(session, (1.0, 0.0, 0.0))
        kept = math.exp(-max(0.0, self.clock() - at) / SLOWDOWN_FADE_MS)
        return 1.0 + (mean - 1.0) * kept, var * kept

    def batch_ran(self, session: str, stored: Profile, batch: int, elapsed_ms: float) -> None:
        if not self.adapt:
            return
        ratio = min(RATIO_MAX, max(RATIO_MIN, elapsed_ms / max(stored.latency_ms(batch), 1e-3)))
        mean, var = self.slowdown.get(session, (ratio, 0.0, 0.0))[:2]
        mean = 0.9 * mean + 0.1 * ratio
        self.slowdown[session] = (mean, 0.9 * var + 0.1 * (ratio - mean) ** 2, self.clock())

    def host_ran(self, model: str, ms: float) -> None:
        self.host[model] = 0.95 * self.host.get(model, ms) + 0.05 * ms

    def host_ms(self, model: str) -> float:
        return self.host.get(model, 0.0)
