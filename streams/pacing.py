"""Pacing: a file delivered the way a camera would deliver it.

A camera paces itself; a file can be read as fast as it decodes. `realtime`
(streams/options.py) asks for a file's frames at their presentation times: the first one now, each later
one its pts after it. `Pacer` is the one place that does this, by an injected clock.

The two entry points default differently, each for its own reason:

- `vigil run` analyses a file as fast as the pipeline consumes it, every frame however
  late, so its results depend on the file alone and not on the machine's speed
  (`REALTIME_OFFLINE`); `--realtime` makes it behave like a camera.
- `vigil serve` puts files beside cameras, as stand-ins for them: a file there costs
  what a camera of its rate would and its frames age as a camera's do
  (`REALTIME_SERVED`); `realtime: false` analyses it whole instead.

A live source is paced by its camera whatever the option says (`is_paced`).
"""

from __future__ import annotations

import time
from typing import Callable

from core.clock import Clock

REALTIME_OFFLINE = False  # `vigil run` (options.OFFLINE)
REALTIME_SERVED = True  # StreamOptions' default: `vigil serve`

# A served file that falls this far behind its times (held up by back-pressure: its
# buffer is full) goes on from now rather than bursting its late frames at once.
SERVED_MAX_LATE_MS = 1000.0


def is_paced(live: bool, realtime: bool) -> bool:
    """Whether a stream's frames come at its rate, so a frame analysed late is a miss;
    a file not paced is analysed whole, however late."""
    return live or realtime


class Pacer:
    """Holds each frame until it is due: `origin + pts_ms` on `clock`, the origin set by
    the first frame (due as it arrives). `max_late_ms`: a frame later than this moves
    the origin up to now, so the frames after it keep their spacing instead of coming
    in a burst; None keeps the origin, so a consumer that falls behind sees its frames
    age as a live stream's would. `sleep_s` waits (seconds); an event's `wait` lets a
    stop cut it short."""

    def __init__(self, clock: Clock, sleep_s: Callable[[float], object] = time.sleep,
                 max_late_ms: float | None = None) -> None:
        self.clock = clock
        self.sleep_s = sleep_s
        self.max_late_ms = max_late_ms
        self._origin_ms: float | None = None  # the clock's time at pts 0

    def wait(self, pts_ms: float) -> float:
        """Waits until the frame at `pts_ms` is due; returns its due time on the clock."""
        now_ms = self.clock()
        if self._origin_ms is None:
            self._origin_ms = now_ms - pts_ms
        due_ms = self._origin_ms + pts_ms
        if due_ms > now_ms:
            self.sleep_s((due_ms - now_ms) / 1000.0)
        elif self.max_late_ms is not None and now_ms - due_ms > self.max_late_ms:
            self._origin_ms += now_ms - due_ms
            due_ms = now_ms
        return due_ms
