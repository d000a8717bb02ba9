"""The global scheduler as a Ray actor: detached, named, restarted without limit.

It wraps `GlobalScheduler` (cluster/planner.py), which holds the plan, and does the
cluster's side of it every beacon:

- health: every backend is pinged; one that is dead (Ray says so) or misses
  `MISSES_TO_LOSE` beacons in a row is removed, and its sessions are placed again on
  the others at once;
- rates: the routers' reported arrival rates, summed per session, are the observed
  rates an epoch plans with (cluster/epochs.py decides when one is due);
- tables: when the plan changed, every backend gets its new table, and the route
  tables' version moves on, which is how routers learn to fetch them.

Backends find it by name and send a heartbeat every beacon with their sessions. A
backend it does not know is registered by its heartbeat, and sessions it does not know
come back with it: after a restart (Ray re-creates the actor with empty state) the
scheduler has its sessions back within one beacon of the backends', and plans them
again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import asdict

from cluster.beacon import NAMESPACE, SCHEDULER_NAME
from cluster.epochs import EpochPolicy
from cluster.placement import Device, Workload
from cluster.planner import GlobalScheduler

log = logging.getLogger("vigil.cluster")

MISSES_TO_LOSE = 2  # beacons in a row without an answer before a backend is lost
GATHER_BEACONS = 1.5  # after a start, backends register for this long before the first plan
ROUTER_SILENT_BEACONS = 10  # a router that has not reported for this long counts no more
MAX_LOST = 1000  # lost backends remembered for the API


class Scheduler:
    """The actor's class (`ray.remote(Scheduler)`)."""

    def __init__(self, policy: EpochPolicy = EpochPolicy(), max_occupancy: float = 1.0) -> None:
        self.policy = policy
        self.started_s = time.monotonic()
        self.core = GlobalScheduler(policy, max_occupancy, now_s=0.0)
        self.handles: dict[str, object] = {}
        self.misses: dict[str, int] = {}
        self.router_rates: dict[str, tuple[float, dict[str, float]]] = {}  # router -> (when, rates)
        self.version = 0
        self._pushed = 0  # core.plans when tables were last pushed
        self._beacons: asyncio.Task | None = None
        self.lost: list[dict] = []

    def _now(self) -> float:
        return time.monotonic() - self.started_s

    def _ensure_beacons(self) -> None:
        if self._beacons is None:
            self._beacons = asyncio.create_task(self._beacon_loop())

    # -- what backends and routers tell it --------------------------------------------------------
    async def heartbeat(self, device_id: str, memory_mb: float, handle, sessions: dict[str, Workload]) -> int:
        self._ensure_beacons()
        self.misses[device_id] = 0
        if device_id not in self.handles:
            self.handles[device_id] = handle
            # a scheduler just (re)started hears every backend for a beacon before it plans
            gathering = self._now() < GATHER_BEACONS * self.policy.beacon_s
            self.core.register_backend(Device(device_id, memory_mb), self._now(), list(sessions.values()),
                                       plan=not gathering)
            if not gathering:
                await self._push()
        return self.version

    async def add_session(self, workload: Workload) -> int:
        self._ensure_beacons()
        self.core.add_session(workload, self._now())
        await self._push()
        return self.version

    async def remove_session(self, session: str) -> int:
        self.core.remove_session(session, self._now())
        await self._push()
        return self.version

    async def report_rates(self, router_id: str, rates: dict[str, float]) -> None:
        self.router_rates[router_id] = (self._now(), dict(rates))

    # -- what it tells them -------------------------------------------------------------------------
    async def routes(self) -> tuple[int, dict[str, dict[str, float]], dict[str, object]]:
        """(version, session -> device -> planned rate, device -> backend handle)."""
        self._ensure_beacons()
        return self.version, {s: self.core.routes(s) for s in self.core.sessions}, dict(self.handles)

    async def plan(self) -> dict:
        """The plan as the API and dashboard show it."""
        p = self.core.placement
        return {"version": self.version, "devices_used": p.devices_used, "lower_bound": round(p.lower_bound, 3),
                "backends": sorted(self.handles),
                "devices": [{"device": d.device_id, "duty_ms": round(d.duty_cycle_ms, 2),
                             "occupancy": round(d.occupancy, 3),
                             "sessions": [{"session": a.session, "rate_rps": round(a.rate_rps, 2), "batch": a.batch}
                                          for a in d.assignments]} for d in p.devices],
                "unplaced": [{"session": s, "rate_rps": round(r, 2)} for s, r in p.unplaced],
                "history": [asdict(e) for e in self.core.history[-20:]], "lost": self.lost[-20:]}

    # -- every beacon -------------------------------------------------------------------------------
    async def _beacon_loop(self) -> None:
        while True:
            await asyncio.sleep(self.policy.beacon_s)
            try:
                await self._beacon()
            except Exception:  # one bad beacon must not end them all
                log.exception("scheduler beacon failed")

    async def _beacon(self) -> None:
        await self._check_health()
        totals: dict[str, float] = {}
        now = self._now()
        for router in [r for r, (at, _) in self.router_rates.items() if now - at > ROUTER_SILENT_BEACONS *
                       self.policy.beacon_s]:
            del self.router_rates[router]  # a front door that stopped reporting sends nothing more
        for _, rates in self.router_rates.values():
            for session, r in rates.items():
                totals[session] = totals.get(session, 0.0) + r
        for session, r in totals.items():
            self.core.report(session, r)
        if self.core.sessions and not self.core.plans:  # the first plan after a (re)start
            self.core.replan(self._now(), f"started with {len(self.handles)} backends")
        else:
            self.core.tick(self._now())
        await self._push()

    async def _check_health(self) -> None:
        tasks = {d: asyncio.ensure_future(_outcome(h.ping.remote())) for d, h in self.handles.items()}
        if tasks:
            await asyncio.wait(tasks.values(), timeout=self.policy.beacon_s)
        for d, task in tasks.items():
            if not task.done():
                self.misses[d] = self.misses.get(d, 0) + 1
            elif isinstance(task.result(), Exception):  # Ray says the actor is dead
                self.misses[d] = MISSES_TO_LOSE
            else:
                self.misses[d] = 0
            if self.misses[d] >= MISSES_TO_LOSE:
                self._lose(d)

    def _lose(self, device_id: str) -> None:
        log.warning("backend %s lost: placing its sessions again", device_id)
        self.handles.pop(device_id, None)
        self.misses.pop(device_id, None)
        self.lost.append({"device": device_id, "at_s": round(self._now(), 3)})
        del self.lost[:-MAX_LOST]
        self.core.remove_backend(device_id, self._now())

    async def _push(self) -> None:
        """New tables to every backend when the plan changed since the last push."""
        if self.core.plans == self._pushed:
            return
        self._pushed = self.core.plans
        # wall-clock milliseconds: versions keep rising across a restart, so that backends
        # holding an older incarnation's table take the new one
        self.version = max(self.version + 1, int(time.time() * 1000))
        sessions = self.core.sessions
        calls = []
        for device_id, handle in self.handles.items():
            plan = self.core.table(device_id)
            workloads = {a.session: sessions[a.session] for a in plan.assignments} if plan else {}
            calls.append(handle.apply.remote(self.version, plan, workloads))
        if calls:
            await asyncio.wait([asyncio.ensure_future(_outcome(c)) for c in calls], timeout=self.policy.beacon_s)


async def _outcome(ref) -> object:
    """An object ref awaited, its error returned rather than raised."""
    try:
        return await ref
    except Exception as exc:
        return exc


def scheduler_handle(policy: EpochPolicy = EpochPolicy(), max_occupancy: float = 1.0):
    """The cluster's scheduler: the running one, or a new detached one on this node (the
    front door's), so that losing a worker node never takes the scheduler with it."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
    return ray.remote(Scheduler).options(
        name=SCHEDULER_NAME, namespace=NAMESPACE, lifetime="detached", get_if_exists=True, max_restarts=-1,
        max_task_retries=-1, num_cpus=0, max_concurrency=1000, scheduling_strategy=here).remote(policy, max_occupancy)
