"""A backend that runs Vigil's engine (engine/engine.py) on the frames the router sends.

The scheduler's table says which sessions the device serves; here a session names a
model of the backend's repository, `name` (its versions by the repository's policy) or
`name:version`. A table loads what its sessions name that is not loaded yet (again, if
an earlier load failed) and unloads the models no session names any more; a session
whose name is neither is left out of the table and logged. Tables are applied one at a
time, in the order they come. Batching, early drop, prefix sharing and preemption are
the engine's own, as on one machine: each request becomes an engine request whose
deadline is the time it had left when it arrived.

A request is (request id, ms it has left, frame [H, W, 3] uint8 RGB), and may add what
the front door asked of it (`Asked`: its app, SLO, priority, heads, input key, whether
it may be dropped); without it, it is the session's own, at priority 0. Its reply is
(request id, outcome, result): `ok` or `late` with the engine's `Result`, or the
engine's drop reason (`deadline`, `overloaded`, `unavailable` while its model loads or
when it cannot, ...), `not_here` (a session the table does not hold) or `error` (a
malformed request, or one the engine did not answer within `ANSWER_GRACE_S` past its
time left) with None. Requests of one group that carry the same input key are one
input to the engine, so a backbone several apps share runs once for them. Frames travel
as Ray arguments: numpy arrays from the object store, without a copy when sender and
backend share a node.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Hashable

import numpy as np

from cluster.beacon import BackendConfig, Beaconing
from cluster.placement import DevicePlan, Workload
from engine.requests import Dropped, Request, Result

log = logging.getLogger("vigil.cluster")

ANSWER_GRACE_S = 30.0  # past a request's time left: a batch that started in time still ends


@dataclass(frozen=True)
class Asked:
    """What the front door asked of a request beside its frame (engine/requests.py's
    fields of the same names)."""

    app: str
    slo_ms: float
    priority: int = 0
    labels: tuple[str, ...] | None = None
    input_key: Hashable | None = None
    may_drop: bool = True


Item = tuple[int, float, np.ndarray] | tuple[int, float, np.ndarray, Asked]
Reply = tuple[int, str, Result | None]


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
        self._applying = asyncio.Lock()
        self._submitter = ThreadPoolExecutor(1, thread_name_prefix="backend-submit")

    def table(self) -> dict[str, Workload]:
        return dict(self.sessions)

    async def start(self) -> str:
        """Open the engine on the repository and start the heartbeats (idempotent);
        returns the device id."""
        if self.engine is None:
            from engine.device import resolve_device
            from engine.engine import Engine
            from models.repository import ModelRepository

            repository = ModelRepository(Path(self.config.models_dir))
            device = resolve_device(self.config.device)  # "auto": the GPU Ray gave the actor, if any
            self.engine = await asyncio.to_thread(Engine, repository, device, lanes=None)
        self._start()
        return self.config.device_id

    async def apply(self, version: int, plan: DevicePlan | None, workloads: dict[str, Workload]) -> int:
        """A table from the scheduler (None: nothing to run); older versions are ignored."""
        async with self._applying:
            if version <= self.table_version:
                return self.table_version
            self.table_version = version
            wanted: dict[str, Workload] = {}
            needed: dict[str, set[int | None]] = {}  # model -> the versions its sessions name
            for a in plan.assignments if plan is not None else ():
                try:
                    model, model_version = session_model(a.session)
                except ValueError as exc:
                    log.error("backend %s: %s", self.config.device_id, exc)
                    continue
                wanted[a.session] = workloads[a.session]
                needed.setdefault(model, set()).add(model_version)
            gone = {session_model(s)[0] for s in self.sessions} - set(needed)
            self.sessions = wanted
            missing = {m: vs for m, vs in needed.items() if self._missing(m, vs)}
            self.loading |= set(missing)
            for model in sorted(gone):
                try:
                    await asyncio.to_thread(self.engine.unload, model)
                except Exception as exc:  # never loaded (its load had failed): nothing to free
                    log.info("backend %s: %s not unloaded: %s", self.config.device_id, model, exc)
            for model, versions in sorted(missing.items()):
                try:
                    for load_versions in _loads(versions):
                        await asyncio.to_thread(self.engine.load, model, load_versions)
                except Exception as exc:  # its requests are dropped as unavailable; the next table tries again
                    log.error("backend %s: cannot load %s: %s", self.config.device_id, model, exc)
                finally:
                    self.loading.discard(model)
            return version

    def _missing(self, model: str, versions: set[int | None]) -> bool:
        """Whether the engine lacks some of `versions` of `model` (None: any version)."""
        loaded = set(self.engine.versions(model))
        return not loaded or bool({v for v in versions if v is not None} - loaded)

    async def submit(self, session: str, items: list[Item]) -> list[Reply]:
        """Each request's reply once all are done (module docstring)."""
        self.arrived[session] += len(items)
        try:
            replies = await self._submit(session, items)
        except Exception as exc:  # a malformed request: its group fails, the backend stays
            log.error("backend %s: a group of %d requests for %s failed: %r", self.config.device_id, len(items),
                      session, exc)
            replies = [(item[0] if isinstance(item, (tuple, list)) and item else None, "error", None)
                       for item in items]
        self.outcomes.update(outcome for _, outcome, _ in replies)
        return replies

    async def _submit(self, session: str, items: list[Item]) -> list[Reply]:
        workload = self.sessions.get(session)
        if workload is None:
            return [(item[0], "not_here", None) for item in items]
        model, version = session_model(session)
        now = self.engine.clock()
        requests = [_request(item, model, version, Asked(session, workload.slo_ms), now) for item in items]
        # preprocessing runs on the submitting thread: one thread beside the event loop,
        # so that heartbeats go on and groups reach the engine one at a time, in order
        submitted = await asyncio.get_running_loop().run_in_executor(self._submitter, self.engine.submit_many, requests)
        futures = [asyncio.wrap_future(f) for f in submitted]
        longest_s = max(item[1] for item in items) / 1000.0
        await asyncio.wait(futures, timeout=max(0.0, longest_s) + ANSWER_GRACE_S)
        return [(item[0], *self._reply(f)) for item, f in zip(items, futures)]

    def _reply(self, fut: asyncio.Future) -> tuple[str, Result | None]:
        if not fut.done():
            fut.cancel()
            log.error("backend %s: the engine did not answer a request in time", self.config.device_id)
            return "error", None
        exc = fut.exception()
        if isinstance(exc, Dropped):
            return exc.reason, None
        if exc is not None:
            log.error("backend %s: a request failed: %r", self.config.device_id, exc)
            return "error", None
        result = fut.result()
        return ("ok" if result.within_slo else "late"), result

    async def report(self) -> dict:
        return {"device": self.config.device_id, "sessions": sorted(self.sessions), "loading": sorted(self.loading),
                "outcomes": dict(self.outcomes), "arrived": dict(self.arrived), "table_version": self.table_version,
                "engine": self.engine.load_report() if self.engine is not None else None,
                "batches": self.engine.metrics.batch_histograms() if self.engine is not None else {}}


def _request(item: Item, model: str, version: int | None, default: Asked, now_ms: float) -> Request:
    """The engine's request for one item; its capture time is as long before `now_ms`
    as its SLO less the time it has left."""
    request_id, remaining_ms, frame, *rest = item
    asked = rest[0] if rest else default
    if not isinstance(asked, Asked) or len(rest) > 1:
        raise ValueError(f"request {request_id!r}: the fourth field is an Asked, and there is none after it")
    return Request(asked.app, model, frame, now_ms - (asked.slo_ms - remaining_ms), asked.slo_ms, version,
                   asked.priority, asked.labels, asked.input_key, asked.may_drop)


def _loads(versions: set[int | None]) -> list[list[int] | None]:
    """The engine loads that give the sessions what they name: the repository's policy
    (None) when one names no version, and the named versions (loaded ones are skipped)."""
    named = sorted(v for v in versions if v is not None)
    return ([None] if None in versions else []) + ([named] if named else [])
