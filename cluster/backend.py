"""A backend: the Ray actor that owns one device and runs what the scheduler gives it.

It wraps a `DeviceRunner` (cluster/device.py) in an asyncio actor, so that one actor
serves many concurrent `submit` calls while its loop runs batches. Every beacon it
tells the scheduler it is alive, with its table's sessions: a scheduler that was
restarted (and so forgot everything) gets the cluster's sessions back from its
backends this way.

Execution is pluggable. `sleep` takes l(b) from the session's profile and sleeps that
long: a device that behaves as its profile says, so that two cores can host a cluster
of many (the bench and the tests). `engine` runs Vigil's engine on the requests' frames
(cluster/engine_backend.py). A backend is a detached actor placed on its node
with `num_gpus=1` (or a configured CPU slot), created by whoever starts Vigil on the
cluster; it is never restarted by Ray: a lost backend's sessions are placed again on
the others by the scheduler.
"""

from __future__ import annotations

import asyncio

from cluster.beacon import NAMESPACE, SCHEDULER_NAME, BackendConfig, Beaconing
from cluster.device import DeviceRunner
from cluster.placement import DevicePlan, Workload

__all__ = ["NAMESPACE", "SCHEDULER_NAME", "Backend", "BackendConfig", "start_backend"]


class Backend(Beaconing):
    """The sleeping backend's actor class (`ray.remote(Backend)`); its methods are called remotely."""

    def __init__(self, config: BackendConfig) -> None:
        super().__init__(config)
        self.runner = DeviceRunner(self._sleep)

    def table(self) -> dict[str, Workload]:
        return dict(self.runner.sessions)

    async def start(self) -> str:
        """Start the device loop and the heartbeats (idempotent); returns the device id."""
        self._start(self.runner.run)
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


def start_backend(config: BackendConfig, node_id: str | None = None, num_gpus: float = 1.0, num_cpus: float = 0.0):
    """A detached backend actor on `node_id` (any node when None), started; its handle."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from cluster.engine_backend import EngineBackend

    strategy = NodeAffinitySchedulingStrategy(node_id, soft=False) if node_id else "DEFAULT"
    actor_class = EngineBackend if config.executor == "engine" else Backend
    handle = ray.remote(actor_class).options(
        name=f"vigil-backend-{config.device_id}", namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
        num_gpus=num_gpus, num_cpus=num_cpus, max_restarts=0, scheduling_strategy=strategy,
        max_concurrency=1000).remote(config)
    ray.get(handle.start.remote())
    return handle
