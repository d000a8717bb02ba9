"""One device of the cluster running the session table the global scheduler gave it,
as Nexus's backends do. Pure asyncio and no Ray: the backend actor (cluster/backend.py)
wraps it, and tests drive it with a fake executor.

Round after round, each session of the table in turn takes up to its batch of the
oldest requests waiting, and runs them (`execute`). The batch may grow to the session's
largest batch B (the one whose latency fits twice in its SLO), not only the planned
one, so that a round's slack absorbs a burst. Before a batch is taken, Nexus's early
drop slides its window along the queue: the oldest request is dropped while the batch
starting with it would end after its deadline. The device is work-conserving: it
waits only when nothing is queued.

A request comes with the time it has left, not a deadline: clocks of different hosts
need not agree, and the router's send time and this device's receive time are close.
A table may drop a session while requests of it are queued: those still run (the
router had routed them here), and then the session is forgotten.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, deque
from dataclasses import dataclass
from typing import Awaitable, Callable

from cluster.placement import Workload, largest_batch


@dataclass
class Job:
    request_id: int
    deadline_s: float  # on this device's clock
    done: asyncio.Future


class DeviceRunner:
    def __init__(self, execute: Callable[[str, int], Awaitable[None]], clock: Callable[[], float] = time.monotonic,
                 max_queue: int = 10_000) -> None:
        """`execute(session, n)`: run a batch of `n` of the session's requests."""
        self.execute = execute
        self.clock = clock
        self.max_queue = max_queue
        self.sessions: dict[str, Workload] = {}  # the table's sessions
        self.batches: dict[str, int] = {}
        self.duty_ms = 0.0
        self._retired: dict[str, Workload] = {}  # left the table with requests still queued
        self.queues: dict[str, deque[Job]] = {}
        self.outcomes: Counter = Counter()
        self.arrived: Counter = Counter()  # session -> requests, since start
        self._wake: asyncio.Event | None = None

    def apply(self, duty_ms: float, assignments: dict[str, tuple[Workload, int]]) -> None:
        """A new table: session -> (its workload, planned batch)."""
        for session in set(self.sessions) - set(assignments):
            if self.queues.get(session):
                self._retired[session] = self.sessions[session]
        self.sessions = {s: w for s, (w, _) in assignments.items()}
        self.batches = {s: max(1, b) for s, (_, b) in assignments.items()}
        self.duty_ms = duty_ms
        for session in assignments:
            self._retired.pop(session, None)
            self.queues.setdefault(session, deque())

    def submit(self, session: str, items: list[tuple[int, float]]) -> list[asyncio.Future]:
        """(request id, ms it has left) each; a future of its outcome each."""
        loop = asyncio.get_running_loop()
        futures = []
        now = self.clock()
        queue = self.queues.get(session) if session in self.sessions else None
        for request_id, remaining_ms in items:
            fut = loop.create_future()
            futures.append(fut)
            self.arrived[session] += 1
            if queue is None or len(queue) >= self.max_queue:
                self._finish(fut, "not_here" if queue is None else "deadline")
                continue
            queue.append(Job(request_id, now + remaining_ms / 1000.0, fut))
        if self._wake is not None:
            self._wake.set()
        return futures

    def workload(self, session: str) -> Workload | None:
        """The session's workload, while it is in the table or still has requests queued."""
        return self.sessions.get(session) or self._retired.get(session)

    async def run(self) -> None:
        """The device's loop, until cancelled."""
        self._wake = asyncio.Event()
        while True:
            if not await self.round():
                self._wake.clear()
                if not any(self.queues.values()):
                    await self._wake.wait()

    async def round(self) -> bool:
        """Each session's batch in turn; whether any ran."""
        ran = False
        for session in list(self.queues):
            queue = self.queues[session]
            w = self.workload(session)
            if w is None:
                continue
            limit = max(self.batches.get(session, 1), largest_batch(w, {}))
            now = self.clock()
            while queue and now + w.profile.latency_ms(min(limit, len(queue))) / 1000.0 > queue[0].deadline_s:
                self._finish(queue.popleft().done, "deadline")
            n = min(limit, len(queue))
            if n:
                jobs = [queue.popleft() for _ in range(n)]
                await self.execute(session, n)
                for job in jobs:
                    self._finish(job.done, "ok")
                ran = True
            if not queue and session not in self.sessions:
                self.queues.pop(session, None)
                self._retired.pop(session, None)
        return ran

    def _finish(self, fut: asyncio.Future, outcome: str) -> None:
        self.outcomes[outcome] += 1
        if not fut.done():
            fut.set_result(outcome)
