"""`vigil serve --cluster`: the engine's boundary (engine/engine.py) on the front door,
with the frames run by engine backends on the cluster's devices.

`ClusterEngine` implements the engine's boundary (runtime/boundaries.py) and runs no
frame. A local `Engine` on the CPU, which is sent no request, loads each model here once
for what the front door answers itself: labels, versions, labels of
versions, the model API, and the profile the scheduler plans with. Each loaded
version is a session of the global scheduler, `name:version`, added when the version
is loaded and removed when it is unloaded. Its planned SLO is the tightest one a
request has asked of it so far (1 s, the apps' default, until one asks for less); its
first rate is `FIRST_RATE_RPS`, and from then on the rate the router observes, never
less than that first one: a session keeps its device while its cameras are quiet.

`submit_many` resolves each request's version here (a label or the latest; an
adaptive request gets the latest: selection by load is a one-device mechanism), then
sends the requests of each session as one group through the router, each with what
it asks (`Asked`) and the time it has left less the round trip to the backend and back
(learnt from the answers), so that the backend's early drop and batching judge by
the deadline that counts here. A block's requests for several apps on one frame carry
the same input key and so share the backbone on the backend. Results and drops come back on
the router's collector thread; the front door counts them in its own metrics, with
latency from capture to the answer here, so the dashboard and the load governor see
what the cameras' owners see. A request the cluster cannot take now is dropped with
the router's reason (`unrouted` before the first plan places its session,
`backend_lost`, `not_here`), never held.

`connect` joins the cluster (`ray.init(address)`), takes its scheduler (or starts
it) and starts an engine backend per GPU on every node, or, on a cluster without
GPUs, one per node on a CPU slot. Backends are detached and named by node and slot,
so a front door that restarts finds them again. Each opens the model repository at
the same path on its node.
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import threading
import time
from concurrent.futures import Future
from functools import partial
from pathlib import Path

from cluster.engine_backend import Asked
from cluster.local import loopback
from cluster.placement import Workload
from core.clock import monotonic_ms
from engine.engine import Engine
from engine.profiles import Profile
from engine.requests import ADAPTIVE, Dropped, Request, Result
from models.repository import ModelRepository

log = logging.getLogger("vigil.cluster")

FIRST_RATE_RPS = 1.0  # a new session's rate until the router has observed one
TRIP_EWMA = 0.05  # weight of each answer in the learnt round trip
READY_WAIT_S = 120.0  # a load waits this long for its sessions to be routed and loaded on their backends
DEFAULT_PLAN_SLO_MS = 1000.0  # the apps' default SLO


class ClusterEngine:
    def __init__(self, repository: ModelRepository, scheduler, router, backends: dict[str, object],
                 address: str, clock=monotonic_ms, nodes: list[str] | None = None) -> None:
        self.local = Engine(repository, "cpu", clock=clock, lanes=1)
        self.repository = repository
        self.clock = clock
        # the local engine's: the front door's metrics, and the device its guest (the LLM) has to itself
        self.metrics = self.local.metrics
        self.arbiter = self.local.arbiter
        self.nodes = nodes or []  # the Ray node ids the backends run on
        self.scheduler = scheduler
        self.router = router
        self.backends = backends  # device id -> handle, as started by `connect`
        self.address = address
        self._ids = itertools.count()
        self._slo_ms: dict[str, float] = {}  # session -> its planned SLO
        self._trip_ms: dict[str, float] = {}  # session -> the round trip to its backends, learnt
        self._sessions_lock = threading.Lock()

    # -- the model verbs: here, then the scheduler's sessions ---------------------------------------
    def load(self, name: str, versions: list[int] | None = None) -> list[int]:
        loaded = self.local.load(name, versions)
        self._sync_sessions(name)
        return loaded

    def ensure_loaded(self, name: str) -> None:
        if not self.versions(name):
            self.load(name)

    def unload(self, name: str, version: int | None = None) -> list[int]:
        out = self.local.unload(name, version)
        self._sync_sessions(name)
        return out

    def reload(self, name: str) -> dict[str, list[int]]:
        out = self.local.reload(name)
        self._sync_sessions(name)
        return out

    # read here: what is loaded, its labels and profiles are the front door's
    def set_label(self, name: str, label: str, version: int) -> None:
        self.local.set_label(name, label, version)

    def labels(self, name: str, version: int | str | None = None) -> tuple[str, ...]:
        return self.local.labels(name, version)

    def domain(self, name: str, version: int | str | None = None) -> str | None:
        return self.local.domain(name, version)

    def versions(self, name: str) -> list[int]:
        return self.local.versions(name)

    def fragment_profiles(self, name: str, version: int | str | None = None) -> list[Profile]:
        return self.local.fragment_profiles(name, version)

    @property
    def ready(self) -> bool:
        return self.local.ready

    def profiles(self) -> dict[str, dict]:
        return self.local.profiles()

    def models(self) -> dict:
        return self.local.models()

    def selections(self) -> list[dict]:
        return self.local.selections()

    def _sync_sessions(self, name: str) -> None:
        """The scheduler's sessions of `name` made the versions loaded here."""
        import ray

        wanted = {f"{name}:{v}": v for v in self.versions(name)}
        with self._sessions_lock:
            ours = {s for s in self._slo_ms if s.partition(":")[0] == name}
            added = [s for s in wanted if s not in ours]
            for s in added:
                self._slo_ms[s] = DEFAULT_PLAN_SLO_MS
            for s in ours - set(wanted):
                del self._slo_ms[s]
        for s in added:
            ray.get(self.scheduler.add_session.remote(self._workload(s, wanted[s], DEFAULT_PLAN_SLO_MS)))
        for s in ours - set(wanted):
            ray.get(self.scheduler.remove_session.remote(s))
        # every session of the model, not only those added here: apps of several streams
        # load it at once, and each must wait until it is served
        self._await_ready(sorted(wanted))

    def _await_ready(self, sessions: list[str]) -> None:
        """Until each session is routed and its backends have loaded its model, so that
        a file's first frames are not dropped as `unrouted` or `unavailable`; past
        `READY_WAIT_S` (no device can take it, say) the load returns and says so."""
        import ray

        waiting = set(sessions)
        deadline = time.monotonic() + READY_WAIT_S
        while waiting and time.monotonic() < deadline:
            self.router.refresh()
            for session in list(waiting):
                devices = self.router.devices(session)
                reports = [ray.get(self.backends[d].report.remote(), timeout=10) for d in devices if d in self.backends]
                if devices and all(session in r["sessions"] and session.partition(":")[0] not in r["loading"]
                                   for r in reports):
                    waiting.discard(session)
            unplaced = {u["session"] for u in ray.get(self.scheduler.plan.remote(), timeout=10)["unplaced"]}
            for session in [s for s in waiting if s in unplaced and not self.router.devices(s)]:
                log.warning("cluster: %s has no device: the cluster's are full (GET /v1/cluster shows the plan); "
                            "its requests are dropped as unrouted until an epoch places it", session)
                waiting.discard(session)
            if waiting:
                time.sleep(0.2)
        if waiting:
            log.warning("cluster: %s not ready on a backend after %g s; their requests are dropped until they are "
                        "(GET /v1/cluster shows the plan)", sorted(waiting), READY_WAIT_S)

    def _workload(self, session: str, version: int, slo_ms: float) -> Workload:
        """The planner's view of a session: the sum of its fragments' fitted lines, as
        profiled here (the backend batches by its own device's profile)."""
        name = session.partition(":")[0]
        profiles = self.fragment_profiles(name, version)
        fits = [p.fit() for p in profiles]
        max_batch = min(p.max_batch for p in profiles)
        profile = Profile.linear(max(1e-3, sum(a for a, _ in fits)), max(0.0, sum(b for _, b in fits)), max_batch,
                                 session, "front-door")
        # kept on a device while its cameras are quiet: it leaves when its model is unloaded
        return Workload(session, FIRST_RATE_RPS, slo_ms, profile, min_rate_rps=FIRST_RATE_RPS)

    def _tighten(self, session: str, version: int, slo_ms: float) -> None:
        """A request asks for less than its session was planned with: plan it again (not
        waited for: the request goes on by the routes there are)."""
        with self._sessions_lock:
            if session not in self._slo_ms or slo_ms >= self._slo_ms[session]:
                return
            self._slo_ms[session] = slo_ms
        log.info("cluster: session %s planned again for a %g ms SLO", session, slo_ms)
        self.scheduler.add_session.remote(self._workload(session, version, slo_ms))

    # -- requests -----------------------------------------------------------------------------------
    def submit(self, request: Request) -> Future:
        return self.submit_many([request])[0]

    def submit_many(self, requests: list[Request]) -> list[Future]:
        futures = [Future() for _ in requests]
        groups: dict[str, list[tuple[int, int]]] = {}  # session -> (index, version)
        for i, req in enumerate(requests):
            try:
                version = self.local.resolve_version(req.model, None if req.version == ADAPTIVE else req.version)
            except LookupError as exc:
                shown = str(req.version) if req.version is not None else "latest"
                self.metrics.arrived(req.app, req.model, shown)
                self.metrics.dropped(req.app, req.model, shown, "unavailable")
                futures[i].set_exception(Dropped("unavailable", str(exc)))
                continue
            self.metrics.arrived(req.app, req.model, str(version))
            session = f"{req.model}:{version}"
            if req.slo_ms < self._slo_ms.get(session, 0.0):
                self._tighten(session, version, req.slo_ms)
            groups.setdefault(session, []).append((i, version))
        now = self.clock()
        for session, members in groups.items():
            trip_ms = self._trip_ms.get(session, 0.0)
            items = []
            for i, _ in members:
                req = requests[i]
                items.append((next(self._ids), req.capture_ms + req.slo_ms - now - trip_ms, req.image,
                              Asked(req.app, req.slo_ms, req.priority, req.labels, req.input_key, req.may_drop)))
            for (i, version), sent in zip(members, self.router.submit(session, items)):
                sent.add_done_callback(partial(self._answered, requests[i], session, version, trip_ms, futures[i]))
        return futures

    def _answered(self, req: Request, session: str, version: int, trip_ms: float, fut: Future,
                  sent: Future) -> None:
        """On the router's collector thread: the cluster's answer to one request."""
        outcome, *beside = sent.result()
        result = beside[0] if beside else None
        if outcome in ("ok", "late") and isinstance(result, Result):
            latency = self.clock() - req.capture_ms
            self._learn_trip(session, latency - result.latency_ms + trip_ms, req.slo_ms)
            self.metrics.completed(req.app, req.model, str(version), latency, req.slo_ms)
            fut.set_result(Result(req.app, req.model, result.version, result.outputs, latency,
                                  latency <= req.slo_ms, result.selected))
        else:
            self.metrics.dropped(req.app, req.model, str(version), outcome)
            fut.set_exception(Dropped(outcome, "on the cluster"))

    def _learn_trip(self, session: str, trip_ms: float, slo_ms: float) -> None:
        """One answer's time on the way there and back: its latency here less the
        backend's, which counts from when it arrived less the time it was told it had
        left (and so lacks the trips, and the allowance it was sent with)."""
        bounded = min(max(trip_ms, 0.0), slo_ms / 2)
        before = self._trip_ms.get(session)
        self._trip_ms[session] = bounded if before is None else before + TRIP_EWMA * (bounded - before)

    # -- reports ------------------------------------------------------------------------------------
    def plan(self) -> dict:
        """The scheduler's plan, and each backend's report (an error for one that did not answer)."""
        import ray

        plan = ray.get(self.scheduler.plan.remote(), timeout=10)
        reports = {}
        for device, handle in self.backends.items():
            try:
                reports[device] = _backend_summary(ray.get(handle.report.remote(), timeout=5))
            except Exception as exc:  # a lost backend: the plan says so too
                reports[device] = {"error": f"{type(exc).__name__}"}
        return {"address": self.address, **plan, "backend_reports": reports,
                "router": {"version": self.router.version, "outcomes": dict(self.router.outcomes)}}

    def load_report(self) -> dict:
        """This process's engine (it runs no frame: its guest, the LLM, has the device to
        itself) and where the frames go."""
        return {**self.local.load_report(), "device": "cluster", "address": self.address,
                "backends": sorted(self.backends), "router_outcomes": dict(self.router.outcomes)}

    def close(self, drain: bool = True, timeout_s: float = 30.0) -> None:
        """The router first (what is in flight fails as backend_lost), then the local
        engine; the backends and the scheduler are the cluster's and stay."""
        self.router.close()
        self.local.close(drain, timeout_s)


def _backend_summary(report: dict) -> dict:
    return {k: report.get(k) for k in ("sessions", "loading", "outcomes", "arrived", "batches", "table_version")}


def _reachable(address: str, timeout_s: float = 5.0) -> None:
    """ConnectionError naming the address when nothing answers there: Ray itself would
    try again for ever."""
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except (OSError, ValueError) as exc:
        raise ConnectionError(f"cluster {address}: no Ray head answers there ({exc}); start one with "
                              f"`ray start --head --port {port}`") from None


def connect(address: str, repository: ModelRepository, cpus_per_backend: float = 1.0, beacon_s: float = 1.0,
            clock=monotonic_ms) -> ClusterEngine:
    """Join the cluster at `address` (`ray start --head`'s host:port, or "auto"), start
    what it lacks (module docstring) and route through it. `cpus_per_backend`: a
    backend's CPU slot on a cluster without GPUs."""
    if address != "auto":
        _reachable(address)
    if address.split(":")[0] in ("127.0.0.1", "localhost"):
        loopback()  # a cluster on this host's loopback (cluster/local.py), before Ray is imported
    import ray

    from cluster.backend import NAMESPACE, BackendConfig, start_backend
    from cluster.epochs import EpochPolicy
    from cluster.router import Router
    from cluster.scheduler import scheduler_handle

    if not ray.is_initialized():
        ray.init(address=address, namespace=NAMESPACE, logging_level="ERROR", log_to_driver=False)
    scheduler = scheduler_handle(EpochPolicy(beacon_s=beacon_s))
    models_dir = str(Path(repository.root).resolve())
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    gpus = {n["NodeID"]: int(n.get("Resources", {}).get("GPU", 0)) for n in nodes}
    backends: dict[str, object] = {}
    backend_nodes: list[str] = []
    for node in nodes:
        node_id = node["NodeID"]
        if any(gpus.values()):
            slots = [(f"{node_id[:8]}-gpu{i}", 1.0, 0.0) for i in range(gpus[node_id])]
        else:
            slots = [(f"{node_id[:8]}-cpu", 0.0, cpus_per_backend)]
        for device_id, num_gpus, num_cpus in slots:
            backend = BackendConfig(device_id, beacon_s=beacon_s, executor="engine", models_dir=models_dir,
                                    device="auto")
            backends[device_id] = start_backend(backend, node_id, num_gpus=num_gpus, num_cpus=num_cpus)
            backend_nodes.append(node_id)
    if not backends:
        raise RuntimeError(f"cluster {address}: no node to start a backend on")
    log.info("cluster %s: %d engine backends (%s)", address, len(backends), ", ".join(sorted(backends)))
    router = Router(scheduler, f"front-{socket.gethostname()}-{os.getpid()}")
    return ClusterEngine(repository, scheduler, router, backends, address, clock, backend_nodes)
