"""A backend that runs Vigil's engine (engine/engine.py) on the frames the router sends.

The scheduler's table says which sessions the device serves; here a session names a
model of the backend's repository, `name` or `name:version`. A table loads the models
its sessions name and unloads those no session names any more. Batching, early drop,
prefix sharing and preemption are the engine's own, as on one machine: each request
becomes an engine request whose deadline is the time it had left when it arrived.

A request is (request id, ms it has left, frame [H, W, 3] uint8 RGB); its reply is
(request id, outcome, detections): `ok` or `late` with the frame's detections, or the
engine's drop reason (`deadline`, `overloaded`, `unavailable` while its model loads or
when it cannot, ...) or `not_here` (a
session the table does not hold) with none. Frames travel as Ray arguments: numpy
arrays from the object store, without a copy when sender and backend share a node.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from pathlib import Path

import numpy as np

from cluster.beacon import BackendConfig, Beaconing
from engine.detections import Detections
from engine.placement import DevicePlan, Workload
from engine.requests import Dropped, Request

log = logging.getLogger("vigil.cluster")

Item = tuple[int, float, np.ndarray]
Reply = tuple[int, str, Detections | None]


def session_model(session: str) -> tuple[str, int | None]:
    """`name` or `name:version` -> (model, version or None for the latest)."""
    name, _, version = session.partition(":")
    if not name or (version and not version.isdigit()):
        raise ValueError(f"session {session!r}: an engine backend's session is a model name or name:version")
    return name, int(version) if version else None


class EngineBackend(Beaconing):
    """The actor's class (`ray.remote(EngineBackend)`); its methods are called remotely."""

    def __init__(self, config: BackendConfig) -> None:
        super().__init__(config)
        self.engine = None  # made by start(), on the actor's node
        self.sessions: dict[str, Workload] = {}
        self.outcomes: Counter = Counter()
        self.arrived: Counter = Counter()  # session -> requests, since start
        self.loading: set[str] = set()  # models of the table not loaded yet: their requests are `unavailable`

    def table(self) -> dict[str, Workload]:
        return dict(self.sessions)

    async def start(self) -> str:
        """Open the engine on the repository and start the heartbeats (idempotent);
        returns the device id."""
        if self.engine is None:
            from engine.engine import Engine
            from engine.repository import ModelRepository

            repository = ModelRepository(Path(self.config.models_dir))
            self.engine = await asyncio.to_thread(Engine, repository, self.config.device, lanes=None)
        self._start()
        return self.config.device_id

    async def apply(self, version: int, plan: DevicePlan | None, workloads: dict[str, Workload]) -> int:
        """A table from the scheduler (None: nothing to run); older versions are ignored."""
        if version <= self.table_version:
            return self.table_version
        self.table_version = version
        wanted = {} if plan is None else {a.session: workloads[a.session] for a in plan.assignments}
        models = {session_model(s)[0] for s in wanted}  # a session that names no model refuses the table
        before = {session_model(s)[0] for s in self.sessions}
        self.sessions = wanted
        for model in sorted(before - models):
            try:
                await asyncio.to_thread(self.engine.unload, model)
            except Exception as exc:  # never loaded (its load failed): nothing to free
                log.info("backend %s: %s not unloaded: %s", self.config.device_id, model, exc)
        for model in sorted(models - before):
            self.loading.add(model)
            try:
                await asyncio.to_thread(self.engine.load, model)
            except Exception as exc:  # its requests are dropped as unavailable, and counted
                log.error("backend %s: cannot load %s: %s", self.config.device_id, model, exc)
            finally:
                self.loading.discard(model)
        return version

    async def submit(self, session: str, items: list[Item]) -> list[Reply]:
        """Each request's reply once all are done (module docstring)."""
        self.arrived[session] += len(items)
        workload = self.sessions.get(session)
        if workload is None:
            self.outcomes["not_here"] += len(items)
            return [(request_id, "not_here", None) for request_id, _, _ in items]
        model, version = session_model(session)
        now = self.engine.clock()
        requests = [Request(session, model, frame, now - (workload.slo_ms - remaining_ms), workload.slo_ms, version)
                    for _, remaining_ms, frame in items]
        futures = self.engine.submit_many(requests)
        done = await asyncio.gather(*(asyncio.wrap_future(f) for f in futures), return_exceptions=True)
        replies = [(request_id, *self._reply(result)) for (request_id, _, _), result in zip(items, done)]
        self.outcomes.update(outcome for _, outcome, _ in replies)
        return replies

    def _reply(self, result) -> tuple[str, Detections | None]:
        if isinstance(result, Dropped):
            return result.reason, None
        if isinstance(result, BaseException):
            log.error("backend %s: a request failed: %r", self.config.device_id, result)
            return "error", None
        return ("ok" if result.within_slo else "late"), result.detections

    async def report(self) -> dict:
        return {"device": self.config.device_id, "sessions": sorted(self.sessions), "loading": sorted(self.loading),
                "outcomes": dict(self.outcomes), "arrived": dict(self.arrived), "table_version": self.table_version,
                "engine": self.engine.load_report() if self.engine is not None else None}
