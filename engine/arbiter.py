"""The device arbiter: who runs on the device next, vision's batch or a guest's step.

Vision (the engine's loop) and a guest that runs in steps (the LLM engine) share one
device through this object and nothing else: the guest joins with `guest(min_share)`
and runs each step inside `turn(cost_ms)`; the loop runs each batch inside `batch()`,
and between plans asks whether the guest is owed a step (`owed`) or its step fits in
the slack the plan leaves (`fits_in`), and if so hands the device over (`lend`). The
policy is engine/share.py's (slack first, `min_share` under full load).

Several guests (a server's LLM engines) join as one: the share is theirs together, and
their steps take turns, one turn at a time.

It shares the engine loop's condition variable, so a guest asking for a turn wakes a
loop that waits for work. Vision's lanes (engine/lanes.py) run batches side by side; a
guest's step has the device to itself, so the lanes start no batch while one is lent
(`lent`) and the step waits for the batches running to end. Device time is counted in
lane time: a batch books its own run time, a step its run time on every lane.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from contextlib import contextmanager
from typing import Callable, Iterator

from engine.metrics import EngineMetrics
from engine.share import DeviceShare


class DeviceArbiter:
    def __init__(self, cond: threading.Condition, metrics: EngineMetrics, lanes: int = 1) -> None:
        self._cond = cond
        self.lanes = lanes
        self._metrics = metrics
        self._batches = 0  # vision batches running (one per lane at most)
        self._stepping = False  # a guest step running
        self._guests = 0  # guests joined; the share is theirs together
        self._queue: deque[object] = deque()  # guests' turns in the order asked: the first one's is next
        self.share = DeviceShare()
        self.closing = False

    # -- the guest's side -------------------------------------------------------------------------
    @contextmanager
    def guest(self, min_share: float) -> Iterator["DeviceArbiter"]:
        """`with arbiter.guest(0.1) as device: while busy: with device.turn(cost_ms): step()`.
        Steps run in the slack vision deadlines leave, or when `min_share` of device time
        is owed; vision waits for at most the steps owed."""
        with self._cond:
            if not self._guests:
                self.share.join(min_share)
            self._guests += 1
            self._cond.notify_all()
        try:
            yield self
        finally:
            with self._cond:
                self._guests -= 1
                if not self._guests:
                    self.share.leave()
                self._cond.notify_all()

    @contextmanager
    def turn(self, cost_ms: float) -> Iterator[None]:
        """One guest step, once the loop grants it (at once when the engine is closing)."""
        me = object()
        with self._cond:
            self._queue.append(me)
        try:
            with self._cond:
                while self._queue[0] is not me:
                    self._cond.wait()
                self.share.step_costs(cost_ms * self.lanes)
                self._cond.notify_all()
                while not self.share.granted and not self.closing:
                    self._cond.wait(0.5)
                if not self.share.granted:
                    self.share.grant(by_share=False)
            with self._held("guest", self.share.guest_ran):
                yield
        finally:
            with self._cond:
                self._queue.remove(me)
                self._cond.notify_all()

    # -- vision's side (the engine loop) ----------------------------------------------------------
    @contextmanager
    def batch(self) -> Iterator[None]:
        """One vision batch on the device; a guest step in progress finishes first."""
        with self._held("vision", self.share.vision_ran):
            yield

    @contextmanager
    def _held(self, tenant: str, ran: Callable[[float], None]) -> Iterator[None]:
        """Hold the device (vision beside other batches, the guest alone); then book the
        time held to `tenant` in the share (`ran`) and the device-seconds metric, and wake
        whoever waits on the share."""
        guest = tenant == "guest"
        with self._cond:
            while self._stepping or (guest and self._batches):
                self._cond.wait()
            if guest:
                self._stepping = True
            else:
                self._batches += 1
        started = time.perf_counter()
        try:
            yield
        finally:
            elapsed_ms = (time.perf_counter() - started) * 1000.0 * (self.lanes if guest else 1)
            with self._cond:
                if guest:
                    self._stepping = False
                else:
                    self._batches -= 1
                ran(elapsed_ms)
                self._cond.notify_all()
            self._metrics.device_seconds.labels(tenant).inc(elapsed_ms / 1000.0)

    def lent(self) -> bool:
        """Under the lock: a guest step is granted and not yet ended."""
        return self.share.granted

    def owed(self) -> bool:
        """Under the lock: the guest's credit covers its next step, before the next batch."""
        return self.share.due()

    def fits_in(self, slack_ms: float | None) -> bool:
        """Under the lock: the guest's next step fits in this much idle device (None: idle
        until work arrives)."""
        return self.share.fits_in(None if slack_ms is None else slack_ms * self.lanes)

    def lend(self, by_share: bool) -> None:
        """Under the lock, in the loop: the guest runs one step; wait until it ends."""
        self.share.grant(by_share)
        self._cond.notify_all()
        while self.share.granted:
            self._cond.wait()

    def report(self) -> dict:
        return self.share.report()
