"""What every backend actor shares, whatever it executes: its configuration, and a
heartbeat to the global scheduler every beacon with the sessions of its table (a
scheduler that was restarted gets the cluster's sessions back this way)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Callable, Coroutine

from cluster.placement import Workload

log = logging.getLogger("vigil.cluster")

NAMESPACE = "vigil"
SCHEDULER_NAME = "vigil-scheduler"


@dataclass(frozen=True)
class BackendConfig:
    device_id: str
    memory_mb: float = float("inf")
    beacon_s: float = 1.0
    executor: str = "sleep"  # or "engine"
    models_dir: str | None = None  # the engine's model repository, on the backend's node
    device: str = "cpu"  # the engine's device

    def __post_init__(self) -> None:
        if not self.device_id or len(self.device_id) > 128:
            raise ValueError("device_id must be 1 to 128 characters")
        if not (0.05 <= self.beacon_s <= 60):
            raise ValueError(f"beacon_s must be in [0.05, 60]; was {self.beacon_s}")
        if self.executor not in ("sleep", "engine"):
            raise ValueError(f"executor must be 'sleep' or 'engine'; was {self.executor!r}")
        if (self.executor == "engine") != (self.models_dir is not None):
            raise ValueError("models_dir is the engine executor's model repository: give it with executor 'engine' "
                             "and only then")


class Beaconing:
    """What every backend does beside running its table: a heartbeat to the scheduler
    every beacon with the sessions it holds."""

    def __init__(self, config: BackendConfig) -> None:
        self.config = config
        self._tasks: list[asyncio.Task] = []
        self.table_version = -1

    def table(self) -> dict[str, Workload]:
        """The sessions of the table it runs now."""
        raise NotImplementedError

    def _start(self, *loops: Callable[[], Coroutine]) -> None:
        """The heartbeats and `loops` as tasks of the actor's event loop, once."""
        if not self._tasks:
            self._tasks = [asyncio.create_task(loop()) for loop in (*loops, self._heartbeats)]

    async def ping(self) -> str:
        return self.config.device_id

    async def _heartbeats(self) -> None:
        import ray

        me = ray.get_runtime_context().current_actor
        scheduler = None
        while True:
            try:
                scheduler = scheduler or ray.get_actor(SCHEDULER_NAME, namespace=NAMESPACE)
                await scheduler.heartbeat.remote(self.config.device_id, self.config.memory_mb, me, self.table())
            except Exception as exc:  # the scheduler is restarting, or not there yet
                log.info("backend %s: heartbeat not delivered: %s", self.config.device_id, exc)
                scheduler = None
            await asyncio.sleep(self.config.beacon_s)
