"""A backend: the Ray actor that owns one device and runs what the scheduler gives it.

It wraps a `DeviceRunner` (cluster/device.py) in an asyncio actor, so that one actor
serves many concurrent `submit` calls while its loop runs batches. Every beacon it
tells the scheduler it is alive, with its table's sessions: a scheduler that was
restarted (and so forgot everything) gets the cluster's sessions back from its
backends this way.

Execution is pluggable. `sleep` takes l(b) from the session's profile and sleeps that
long: a device that behaves as its profile says, so that two cores can host a cluster
of many (the bench and the tests). A backend is a detached actor placed on its node
with `num_gpus=1` (or a configured CPU slot), created by whoever starts Vigil on the
cluster; it is never restarted by Ray: a lost backend's sessions are placed again on
the others by the scheduler.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from cluster.device import DeviceRunner
from engine.placement import DevicePlan, Workload

log = logging.getLogger("vigil.cluster")

NAMESPACE = "vigil"
SCHEDULER_NAME = "vigil-scheduler"


@dataclass(frozen=True)
class BackendConfig:
    device_id: str
    memory_mb: float = float("inf")
    beacon_s: float = 1.0
    executor: str = "sleep"

    def __post_init__(self) -> None:
        if not self.device_id or len(self.device_id) > 128:
            raise ValueError("device_id must be 1 to 128 characters")
        if not (0.05 <= self.beacon_s <= 60):
            raise ValueError(f"beacon_s must be in [0.05, 60]; was {self.beacon_s}")
        if self.executor != "sleep":
            raise ValueError(f"executor must be 'sleep'; was {self.executor!r}")


class Backend:
    """The actor's class (`ray.remote(Backend)`); its methods are called remotely."""

    def __init__(self, config: BackendConfig) -> None:
        self.config = config
        self.runner = DeviceRunner(self._sleep)
        self._tasks: list[asyncio.Task] = []
        self.table_version = -1

    async def start(self) -> str:
        """Start the device loop and the heartbeats (idempotent); returns the device id."""
        if not self._tasks:
            self._tasks = [asyncio.create_task(self.runner.run()), asyncio.create_task(self._heartbeats())]
        return self.config.device_id

    async def ping(self) -> str:
        return self.config.device_id

    async def submit(self, session: str, items: list[tuple[int, float]]) -> list[tuple[int, str]]:
        """(request id, ms it has left) each; returns (request id, outcome) each, once all are done."""
        futures = self.runner.submit(session, items)
        outcomes = await asyncio.gather(*futures)
        return [(request_id, outcome) for (request_id, _), outcome in zip(items, outcomes)]

    async def apply(self, version: int, plan: DevicePlan | None, workloads: dict[str, Workload]) -> int:
        """A table from the scheduler (None: nothing to run); older versions are ignored."""
        if version <= self.table_version:
            return self.table_version
        self.table_version = version
        assignments = {} if plan is None else {a.session: (workloads[a.session], a.batch) for a in plan.assignments}
        self.runner.apply(plan.duty_cycle_ms if plan else 0.0, assignments)
        return version

    async def report(self) -> dict:
        return {"device": self.config.device_id, "sessions": sorted(self.runner.sessions),
                "duty_ms": self.runner.duty_ms, "outcomes": dict(self.runner.outcomes),
                "arrived": dict(self.runner.arrived), "table_version": self.table_version}

    async def _sleep(self, session: str, n: int) -> None:
        w = self.runner.workload(session)
        await asyncio.sleep(w.profile.latency_ms(n) / 1000.0)

    async def _heartbeats(self) -> None:
        import ray

        me = ray.get_runtime_context().current_actor
        scheduler = None
        while True:
            try:
                scheduler = scheduler or ray.get_actor(SCHEDULER_NAME, namespace=NAMESPACE)
                await scheduler.heartbeat.remote(self.config.device_id, self.config.memory_mb, me,
                                                 dict(self.runner.sessions))
            except Exception as exc:  # the scheduler is restarting, or not there yet
                log.info("backend %s: heartbeat not delivered: %s", self.config.device_id, exc)
                scheduler = None
            await asyncio.sleep(self.config.beacon_s)


def start_backend(config: BackendConfig, node_id: str | None = None, num_gpus: float = 1.0, num_cpus: float = 0.0):
    """A detached backend actor on `node_id` (any node when None), started; its handle."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    strategy = NodeAffinitySchedulingStrategy(node_id, soft=False) if node_id else "DEFAULT"
    handle = ray.remote(Backend).options(
        name=f"vigil-backend-{config.device_id}", namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
        num_gpus=num_gpus, num_cpus=num_cpus, max_restarts=0, scheduling_strategy=strategy,
        max_concurrency=1000).remote(config)
    ray.get(handle.start.remote())
    return handle
