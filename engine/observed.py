"""Profiles as serving sees them: the stored l(b) scaled by what batches take now.

A stored profile can be wrong either way: measured beside a busy neighbour it is too
slow, and a neighbour that arrives later makes it too fast. Each session keeps the
observed/profiled latency ratios of its last `WINDOW` batches, and plans use the
stored profile scaled by their `QUANTILE`: plan for the slow batches too, but not for
the one stall in thirty. A level that moves (a neighbour comes or goes) is taken at
once when `SHIFT_RUN` batches in a row fall outside the window's range on the same
side, whichever way it moved: a profile 4x too slow and one 4x too fast are
corrected alike, and the first batch a session runs sets its level.

A slowdown is learnt only from batches that run. A session whose every request looks
hopeless still runs a probe batch now and then (engine/scheduler.py), so a slowdown
that has passed, or a profile that was too slow all along, is seen to be. Per model,
the host work of a request (pre- and postprocessing) is kept too: it counts against
deadlines and capacity. Called under the engine's lock, or by one thread per key.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from engine.profiles import Profile

# the range one batch's observed/profiled ratio is clamped to: wide enough for a profile
# measured on a busy machine (several times slow, engine/machine_load.py) and for a
# neighbour arriving later, which slows batches as much
RATIO_MIN, RATIO_MAX = 0.1, 10.0
WINDOW = 32  # batches remembered per session
QUANTILE = 0.9  # of their ratios, what plans scale profiles by
SHIFT_RUN = 3  # batches in a row outside the window's range, on one side: the level moved
SHIFT_MARGIN = 0.1  # of log ratio beyond the window's range that counts as outside (batch times jitter)
FACTOR_STEP = 0.01  # plans scale profiles by the factor rounded to this


@dataclass
class Slowdown:
    """A session's last log(observed / profiled) latencies, the run of them outside
    the window's range (all on one side), and the factor plans use."""
    window: deque = field(default_factory=lambda: deque(maxlen=WINDOW))
    run: list = field(default_factory=list)
    factor: float = 1.0

    def add(self, x: float) -> None:
        """One batch's log ratio. One outside the window's range waits in `run` (counted
        in the factor meanwhile): a run long enough replaces the window, and a run that
        ends (a batch back in range, or beyond the other side) joins it."""
        side = self._side(x)
        if self.run and side != self._side(self.run[0]):
            self.window.extend(self.run)
            self.run = []
            side = self._side(x)
        if side:
            self.run.append(x)
            if len(self.run) >= SHIFT_RUN:  # the level moved: start from where it is now
                self.window.clear()
                self.window.extend(self.run)
                self.run = []
        else:
            self.window.append(x)
        ordered = sorted([*self.window, *self.run])
        self.factor = math.exp(ordered[min(len(ordered) - 1, int(QUANTILE * len(ordered)))])

    def _side(self, x: float) -> int:
        """+1 above the window's range, -1 below, 0 within (or no window yet)."""
        if not self.window:
            return 0
        if x > max(self.window) + SHIFT_MARGIN:
            return 1
        return -1 if x < min(self.window) - SHIFT_MARGIN else 0


class ObservedProfiles:
    def __init__(self, adapt: bool = True) -> None:
        """`adapt=False`: plan with the stored profiles as they are."""
        self.adapt = adapt
        self.slowdown: dict[str, Slowdown] = {}
        self.host: dict[str, float] = {}  # model -> host ms per request
        # session -> (stored, rounded factor, scaled): the factor moves with every batch
        # and admission asks for every request, while a new Profile is not free (it works out
        # its latencies at every batch size); rounding lets one serve until the factor moves
        self._scaled: dict[str, tuple[Profile, float, Profile]] = {}

    def current(self, session: str, stored: Profile) -> Profile:
        factor = self.factor(session)
        if abs(factor - 1.0) < 0.02:
            return stored
        rounded = round(factor / FACTOR_STEP) * FACTOR_STEP
        cached = self._scaled.get(session)
        if cached is None or cached[0] is not stored or cached[1] != rounded:
            cached = (stored, rounded, stored.scaled(rounded))
            self._scaled[session] = cached
        return cached[2]

    def factor(self, session: str) -> float:
        """What plans scale the session's stored profile by (1 before any batch ran)."""
        s = self.slowdown.get(session)
        return 1.0 if s is None else s.factor

    def batch_ran(self, session: str, stored: Profile, batch: int, elapsed_ms: float) -> None:
        if not self.adapt:
            return
        ratio = min(RATIO_MAX, max(RATIO_MIN, elapsed_ms / max(stored.latency_ms(batch), 1e-3)))
        self.slowdown.setdefault(session, Slowdown()).add(math.log(ratio))

    def host_ran(self, model: str, ms: float) -> None:
        self.host[model] = 0.95 * self.host.get(model, ms) + 0.05 * ms

    def host_ms(self, model: str) -> float:
        return self.host.get(model, 0.0)
