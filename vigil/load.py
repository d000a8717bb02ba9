"""Load control in `vigil serve`: which apps are overloaded, and the rate each samples.

After every block, each app's worker reports how many frames it sampled and how many
of them the engine shed (dropped for a deadline or a full queue). An app becomes
`overloaded` when a recent share of its frames (an EWMA) above `OVERLOADED_AT` is shed,
or its rate is lowered, and stops being so once under `CALM_AT` at its full rate. An app that
declares `min_fps` has its sampled rate lowered, multiplicatively, toward that floor
while it or any app of equal or higher priority is shedding, and raised back slowly
once they have all been calm for a while (AIMD, as in VideoStorm's and Chameleon's
frame-rate degradation): a low-priority app gives up frames at admission, before any
decode-side or device work is spent on them, so that fewer frames are dropped late.
Higher priorities feel only each other's pressure, so the lowest degrade first.

Pure logic behind a lock; the worker applies the rate to its sampler and counts the
frames it no longer samples as shed (`rate`).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Callable

log = logging.getLogger("vigil.load")

ALPHA = 0.3  # weight of one block in an app's shed share
OVERLOADED_AT = 0.05  # shed share above which an app is overloaded (and lower ones degrade)
CALM_AT = 0.01  # shed share under which an app counts as calm
CALM_BLOCKS = 8  # calm blocks in a row before a degraded rate is raised again
DECREASE = 0.8  # a degrading app's rate is multiplied by this per shedding block
RECOVER = 0.05  # of its full rate, given back per calm block


@dataclass
class AppLoad:
    priority: int
    full_fps: float  # the rate it asks for (its fps, or the stream's)
    min_fps: float | None
    rate_fps: float
    shed_share: float = 0.0
    calm_blocks: int = 0
    overloaded: bool = False

    def to_dict(self) -> dict:
        return {"overloaded": self.overloaded, "shed_share": round(self.shed_share, 4),
                "rate_fps": round(self.rate_fps, 2), "full_fps": round(self.full_fps, 2)}


class LoadGovernor:
    def __init__(self, on_change: Callable[[str, AppLoad], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._apps: dict[str, AppLoad] = {}
        self.on_change = on_change  # (app, its state) when overloaded starts or ends

    def report(self, app: str, priority: int, full_fps: float, min_fps: float | None, sampled: int,
               shed: int) -> float:
        """One block's outcome for `app`; returns the rate it should sample next."""
        with self._lock:
            state = self._apps.get(app)
            if state is None:
                state = self._apps[app] = AppLoad(priority, full_fps, min_fps, full_fps)
            elif (state.priority, state.full_fps, state.min_fps) != (priority, full_fps, min_fps):  # a PATCH
                state.priority, state.full_fps, state.min_fps = priority, full_fps, min_fps
                state.rate_fps = full_fps if min_fps is None else min(state.rate_fps, full_fps)
            if sampled > 0:
                state.shed_share = (1 - ALPHA) * state.shed_share + ALPHA * min(1.0, shed / sampled)
            pressure = max(s.shed_share for s in self._apps.values() if s.priority >= priority)
            state.calm_blocks = state.calm_blocks + 1 if pressure < CALM_AT else 0
            if min_fps is not None:
                floor = min(min_fps, full_fps)
                if pressure > OVERLOADED_AT:
                    state.rate_fps = max(floor, state.rate_fps * DECREASE)
                elif state.calm_blocks >= CALM_BLOCKS:
                    state.rate_fps = min(full_fps, state.rate_fps + RECOVER * full_fps)
            # hysteresis: overloaded above OVERLOADED_AT, calm again only under CALM_AT at full rate
            limit = CALM_AT if state.overloaded else OVERLOADED_AT
            overloaded = state.shed_share > limit or state.rate_fps < full_fps
            changed = overloaded != state.overloaded
            state.overloaded = overloaded
            rate = state.rate_fps
        if changed:
            self._say(app, state)
        return rate

    def _say(self, app: str, state: AppLoad) -> None:
        if state.overloaded:
            log.warning("app %s is overloaded: %.0f%% of its frames shed, sampling %.1f of %.1f frames/s",
                        app, 100 * state.shed_share, state.rate_fps, state.full_fps)
        else:
            log.info("app %s is no longer overloaded (sampling %.1f frames/s)", app, state.rate_fps)
        if self.on_change is not None:
            self.on_change(app, state)

    def state(self, app: str) -> dict:
        with self._lock:
            s = self._apps.get(app)
            return s.to_dict() if s else {"overloaded": False, "shed_share": 0.0, "rate_fps": None, "full_fps": None}

    def forget(self, app: str) -> None:
        with self._lock:
            self._apps.pop(app, None)
