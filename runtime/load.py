"""Load control in `vigil serve`: which apps are overloaded, and the rate each samples.

After every block, each app's worker reports how many frames it sampled and how many
of them the engine shed (dropped for a deadline or a full queue). An app becomes
`overloaded` when a recent share of its frames (an EWMA) above `OVERLOADED_AT` is shed,
or its rate is lowered, and stops being so once under `CALM_AT` at its full rate.

An app that declares `min_fps` has its sampled rate controlled as TCP controls its
window (AIMD, as in VideoStorm's and Chameleon's frame-rate degradation): when it or an
app of equal or higher priority has just shed frames (a block above `OVERLOADED_AT`,
and more than `SHED_TOLERANCE` of its last `FRAMES_SEEN` or so), its rate is cut, at
most once per `HOLD_S` (the frames sampled before the cut take about that long to come
back, so one congestion episode cuts once); once `HOLD_S` has passed with no such shed,
the rate grows by `INCREASE_PER_S` of its full rate per second. So the sum of the rates
probes the device's capacity and settles just under it, whatever that capacity is on
this machine. The cut grows with the congestion, as DCTCP's window does: the rate is
multiplied by 1 - s/2 (s: the largest shed share among those apps), never by more than
`DECREASE` nor less than `DEEPEST_CUT`. Near capacity, where a few frames are shed, that
is `DECREASE`; sixteen cameras that start at once, three times over capacity, are under
it in three cuts rather than fifteen, where every frame in between was decoded and
queued to be dropped. An increase split among the apps measured worse: startup stalls
cut the rates to their floors and they came back too slowly. A low-priority app gives
up frames at admission, before decode-side or device work is spent on them. Higher
priorities feel only each other's pressure, so the lowest degrade first.

Pure logic behind a lock; the worker applies the rate to its sampler and counts the
frames it no longer samples as shed (`rate`).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable

log = logging.getLogger("vigil.load")

ALPHA = 0.3  # weight of one block in an app's shed share
OVERLOADED_AT = 0.05  # shed share above which an app is overloaded (and a block counts as shedding)
CALM_AT = 0.01  # shed share under which an app counts as calm
DECREASE = 0.9  # a degrading app's rate is multiplied by at most this per congestion episode...
DEEPEST_CUT = 0.5  # ... and by at least this, when nearly everything is shed
HOLD_S = 2.0  # one cut per episode: a block plus a 1 s SLO pass before a cut shows in what is shed
# A cut needs more than this share shed over an app's last ~FRAMES_SEEN frames: a lone
# frame late in a latency tail is not congestion, and cutting every low app's rate for
# it left the device idle a fifth of the time
SHED_TOLERANCE = 0.04
FRAMES_SEEN = 30
INCREASE_PER_S = 0.05  # of its full rate, given back per calm second


@dataclass
class AppLoad:
    priority: int
    full_fps: float  # the rate it asks for (its fps, or the stream's)
    min_fps: float | None
    rate_fps: float
    shed_share: float = 0.0
    recent_shed: float = 0.0  # share shed over its last ~FRAMES_SEEN frames (an EWMA per frame)
    overloaded: bool = False
    last_report: float | None = None
    last_shed: float = float("-inf")  # when a block of its shed more than OVERLOADED_AT, past SHED_TOLERANCE
    last_cut: float = float("-inf")

    def to_dict(self) -> dict:
        return {"overloaded": self.overloaded, "shed_share": round(self.shed_share, 4),
                "rate_fps": round(self.rate_fps, 2), "full_fps": round(self.full_fps, 2)}


class LoadGovernor:
    def __init__(self, on_change: Callable[[str, AppLoad], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._apps: dict[str, AppLoad] = {}
        self._others: dict[str, int] = {}  # app -> priority, of apps that do not report
        self.on_change = on_change  # (app, its state) when overloaded starts or ends
        self.clock = clock

    def report(self, app: str, priority: int, full_fps: float, min_fps: float | None, sampled: int,
               shed: int) -> float:
        """One block's outcome for `app`; returns the rate it should sample next."""
        now = self.clock()
        with self._lock:
            state = self._apps.get(app)
            if state is None:
                state = self._apps[app] = AppLoad(priority, full_fps, min_fps, full_fps)
            elif (state.priority, state.full_fps, state.min_fps) != (priority, full_fps, min_fps):  # a PATCH
                state.priority, state.full_fps, state.min_fps = priority, full_fps, min_fps
                state.rate_fps = full_fps if min_fps is None else min(state.rate_fps, full_fps)
            if sampled > 0:
                share = min(1.0, shed / sampled)
                state.shed_share = (1 - ALPHA) * state.shed_share + ALPHA * share
                weight = 1.0 - (1.0 - 1.0 / FRAMES_SEEN) ** sampled
                state.recent_shed = (1 - weight) * state.recent_shed + weight * share
                if share > OVERLOADED_AT and state.recent_shed > SHED_TOLERANCE:
                    state.last_shed = now
            elapsed = 0.0 if state.last_report is None else max(0.0, now - state.last_report)
            state.last_report = now
            if min_fps is not None:
                self._steer(state, min(min_fps, full_fps), now, elapsed)
            # hysteresis: overloaded above OVERLOADED_AT, calm again only under CALM_AT at full rate
            limit = CALM_AT if state.overloaded else OVERLOADED_AT
            overloaded = state.shed_share > limit or state.rate_fps < full_fps
            changed = overloaded != state.overloaded
            state.overloaded = overloaded
            rate = state.rate_fps
        if changed:
            self._say(app, state)
        return rate

    def _steer(self, state: AppLoad, floor: float, now: float, elapsed: float) -> None:
        """AIMD on the app's rate from the latest shedding of its priority or higher. Under lock."""
        pressing = [s for s in self._apps.values() if s.priority >= state.priority]
        shed_at = max(s.last_shed for s in pressing)
        if now - shed_at < HOLD_S:
            if shed_at >= state.last_cut + HOLD_S:  # a shed after the last cut had time to show
                share = max(s.shed_share for s in pressing)
                state.rate_fps = max(floor, state.rate_fps * min(DECREASE, max(DEEPEST_CUT, 1 - share / 2)))
                state.last_cut = now
        else:
            state.rate_fps = min(state.full_fps, state.rate_fps + INCREASE_PER_S * state.full_fps * elapsed)

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

    def note(self, app: str, priority: int) -> None:
        """An app that sheds nothing (a host detector's) is still a priority in use."""
        with self._lock:
            self._others[app] = priority

    def top_priority(self) -> int | None:
        """The highest priority of any app reporting or noted (None: none yet)."""
        with self._lock:
            return max([s.priority for s in self._apps.values()] + list(self._others.values()), default=None)

    def forget(self, app: str) -> None:
        with self._lock:
            self._apps.pop(app, None)
            self._others.pop(app, None)
