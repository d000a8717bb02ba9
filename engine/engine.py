"""The engine: one per device. Requests in, results out; schedule -> execute -> update.

Narrow boundary (so a cluster layer can wrap each engine as an actor): `submit_many`,
`load` / `ensure_loaded` / `unload` / `reload` / `set_label`, `profiles`, `load_report`, `metrics`, `close`,
and `guest` for another engine that shares the device (the LLM's steps are turns of this
schedule, engine/share.py).

A request names a model (and version or label), one frame and the labels it needs.
Its path is the fragments from the model's root to the heads that detect those labels.
Each fragment hash is one session with one queue; an entry in a queue is one input to
that fragment, and every request that needs the same fragment on the same input (the
same `input_key`, e.g. stream and frame id) subscribes to the same entry, so a shared
backbone runs once per frame for all the apps and models that contain it.

The SLO is split over a path's stages in proportion to their profiled latency at
batch 1; each stage's share sets that entry's deadline. A request that may not be
dropped (an offline run's) has no deadline to schedule by: it waits its turn, and its
latency is still measured against its SLO. Host work is kept off the
device loop: preprocessing runs on the submitting thread, postprocessing on a pool.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterator

import numpy as np

from engine.classes import Classes
from engine.detections import Detections
from engine.metrics import EngineMetrics
from engine.repository import ModelRepository
from engine.scheduler import Plan, Policy, WorkItem, make_policy
from engine.selection import RateMeter, VersionCost, capacity, choose_version
from engine.servables import ModelManager, Servable
from engine.share import DeviceShare
from streams.clock import monotonic_ms

log = logging.getLogger("vigil.engine")
SLOWDOWN_FADE_MS = 3000.0  # a session's learnt slowdown fades with this time constant while it runs nothing


ADAPTIVE = "adaptive"  # Request.version: let the engine choose by load
# What a lower-priority request reserves for its later stages, as a share of its SLO:
# enough to wait behind one higher-priority batch (at most half that one's budget).
YIELD_SHARE = 0.35
# Time between one stage ending and the next starting, or a result being handed over:
# thread hand-offs and the scheduler's own work, which profiles do not see.
HANDOFF_MS = 3.0


class Dropped(Exception):
    """The engine gave up on a request; `reason` says why (deadline, overloaded, error, ...).
    `selected`: the adaptive-selection switch this request saw, as on a Result."""

    def __init__(self, reason: str, detail: str = "", selected: dict | None = None) -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.selected = selected


@dataclass(frozen=True)
class Request:
    app: str
    model: str
    image: np.ndarray  # [H, W, 3] uint8 RGB
    capture_ms: float  # deadline = capture_ms + slo_ms
    slo_ms: float
    version: int | str | None = None  # number, label, "adaptive", or None for the latest
    priority: int = 0
    labels: tuple[str, ...] | None = None  # which heads; all when None
    input_key: Hashable | None = None  # equal keys are the same input (computed once)
    # False: never dropped for its deadline (an offline run, which waits instead);
    # latency is still measured against slo_ms
    may_drop: bool = True


@dataclass
class Result:
    app: str
    model: str
    version: int
    outputs: dict[str, Any]  # leaf fragment -> Detections or array
    latency_ms: float
    within_slo: bool
    # the adaptive-selection switch this request saw ({app, model, from_version,
    # to_version, rate_per_s, t_ms}), so the caller that owns the app reports it
    selected: dict | None = None

    @property
    def detections(self) -> Detections:
        return Detections.concat([o for o in self.outputs.values() if isinstance(o, Detections)])

    @property
    def classes(self) -> Classes | None:
        """A classifier's answer (its first leaf that gives one); None for other models."""
        return next((o for o in self.outputs.values() if isinstance(o, Classes)), None)


@dataclass
class _State:
    request: Request
    servable: Servable
    future: Future
    leaves: list[str]
    needed: set[str]
    stage: dict[str, tuple[float, float]]  # fragment -> (deadline_ms, budget_ms)
    outputs: dict[str, Any] = field(default_factory=dict)
    finished: bool = False
    selected: dict | None = None  # the selection switch it saw (Result.selected)


@dataclass
class _Entry:
    item_id: int
    session: str
    key: Hashable | None
    input: Any
    arrival_ms: float
    subscribers: list[tuple[_State, str]]  # (request, fragment name within its model)
    deadline_ms: float = float("inf")
    budget_ms: float = float("inf")
    priority: int = 0
    slo_ms: float = float("inf")
    downstream: bool = False
    flow: str = ""  # the first subscriber's app (fair shares between apps)

    def subscribe(self, state: _State, fragment: str) -> None:
        self.subscribers.append((state, fragment))
        self.flow = self.flow or state.request.app
        deadline, budget = state.stage[fragment]
        self.deadline_ms = min(self.deadline_ms, deadline)
        self.budget_ms = min(self.budget_ms, budget)
        self.priority = max(self.priority, state.request.priority)
        self.slo_ms = min(self.slo_ms, state.request.slo_ms)

    def shape(self) -> Any:
        return _shape(self.input)


def _shape(x: Any) -> Any:
    """An input's shape: a tensor's, or a dict's keys with their values' (nested); other
    values have none."""
    if isinstance(x, dict):
        return tuple(sorted((k, _shape(v)) for k, v in x.items()))
    return tuple(getattr(x, "shape", ()))


class GuestTurns:
    """A guest's handle on the device (from `Engine.guest`): one step per `turn`."""

    def __init__(self, engine: "Engine") -> None:
        self._engine = engine

    @contextmanager
    def turn(self, cost_ms: float) -> Iterator[None]:
        e = self._engine
        with e._cond:
            e.share.step_costs(cost_ms)
            e._cond.notify_all()
            while not e.share.granted and not e._closing:
                e._cond.wait(0.5)
            if not e.share.granted:  # closing: the loop grants nothing more
                e.share.grant(by_share=False)
        started = time.perf_counter()
        try:
            with e.device_turn:
                yield
        finally:
            elapsed_ms = (time.perf_counter() - started) * 1000.0
            with e._cond:
                e.share.guest_ran(elapsed_ms)
                e._cond.notify_all()
            e.metrics.device_seconds.labels("guest").inc(elapsed_ms / 1000.0)


class Engine:
    def __init__(self, repository: ModelRepository, device: str = "cpu", policy: str | Policy = "nexus",
                 clock: Callable[[], float] = monotonic_ms, max_queue: int = 4096, postprocess_workers: int = 1,
                 share: bool = True, adapt_profiles: bool = True) -> None:
        """`share=False` turns off prefix sharing: each version keeps its own fragments and
        equal inputs are not merged (how TF Serving or Clipper would serve the models).
        `adapt_profiles=False` plans with the stored profiles as they are, never scaled
        by the latencies observed while serving."""
        self.adapt_profiles = adapt_profiles
        self.device = device
        self.share = share
        self.clock = clock
        self.policy = make_policy(policy) if isinstance(policy, str) else policy
        self.metrics = EngineMetrics()
        self.manager = ModelManager(repository, device, share=share)
        self.max_queue = max_queue
        self._cond = threading.Condition(self.manager.lock)
        self._queues: dict[str, list[_Entry]] = {}
        # Held while a batch runs on the device. A guest sharing the device (the LLM
        # engine) runs one step at a time in `guest`'s turns, when the schedule grants it:
        # in vision's slack, or by its minimum share (engine/share.py).
        self.device_turn = threading.Lock()
        self.share = DeviceShare()
        self._pending: dict[tuple[str, Hashable], _Entry] = {}
        self._next_id = 0
        self._closing = False
        self._rates: dict[str, RateMeter] = {}  # model -> recent request rate (adaptive selection)
        # session -> (mean, variance) of observed / profiled batch latency (EWMA), and when
        # a batch last updated them: profiles are measured on an idle device; under load
        # (host threads, other processes) batches run slower, and less evenly
        self._slowdown: dict[str, tuple[float, float, float]] = {}
        self._host_ms: dict[str, float] = {}  # model -> host work per request (pre + post), EWMA
        self._selected: dict[tuple[str, str], int] = {}  # (app, model) -> version chosen last
        self._top_priority = 0  # highest request priority seen (later stages of lower ones reserve time)
        # every switch, for reports and benches; an app takes its own from its Result.selected
        self.selection_events: deque[dict] = deque(maxlen=10_000)
        self._busy_ms = 0.0
        self._started_ms = clock()
        self._post = ThreadPoolExecutor(postprocess_workers, thread_name_prefix="engine-post")
        self._thread = threading.Thread(target=self._loop, name=f"engine-{device}", daemon=True)
        self._thread.start()

    # -- models -------------------------------------------------------------------------------------
    def load(self, name: str, versions: list[int] | None = None) -> list[int]:
        loaded = self.manager.load(name, versions)
        self._mark_random(name)
        return loaded

    def ensure_loaded(self, name: str) -> None:
        """Load a model unless some version of it is loaded (cheap on the request path)."""
        with self.manager.lock:
            if self.manager.versions.get(name):
                return
        self.load(name)

    def unload(self, name: str, version: int | None = None) -> list[int]:
        return self.manager.unload(name, version)

    def reload(self, name: str) -> dict[str, list[int]]:
        out = self.manager.reload(name)
        self._mark_random(name)
        return out

    def set_label(self, name: str, label: str, version: int) -> None:
        self.manager.set_label(name, label, version)

    def _mark_random(self, name: str) -> None:
        with self.manager.lock:
            for v, s in self.manager.versions.get(name, {}).items():
                self.metrics.random_weights.labels(name, str(v)).set(1 if s.model.random_weights else 0)

    @property
    def ready(self) -> bool:
        return self.manager.loading == 0

    # -- a guest on the device ------------------------------------------------------------------
    @contextmanager
    def guest(self, min_share: float) -> Iterator["GuestTurns"]:
        """A guest with work to do (the LLM) takes turns on the device until it leaves:
        `with engine.guest(0.1) as g: while busy: with g.turn(cost_ms): step()`. Its
        steps run in the slack vision deadlines leave, or when `min_share` of device time
        is owed to it (engine/share.py); vision waits for at most the steps owed."""
        with self._cond:
            self.share.join(min_share)
            self._cond.notify_all()
        try:
            yield GuestTurns(self)
        finally:
            with self._cond:
                self.share.leave()
                self._cond.notify_all()

    def _lend(self, by_share: bool) -> None:
        """Under the lock, in the loop: the guest runs its step; wait until it ends."""
        self.share.grant(by_share)
        self._cond.notify_all()
        while self.share.granted:
            self._cond.wait()

    # -- requests -----------------------------------------------------------------------------------
    def submit(self, request: Request) -> Future:
        return self.submit_many([request])[0]

    def submit_many(self, requests: list[Request]) -> list[Future]:
        """Submit together so requests on the same input share fragments reliably."""
        futures: list[Future] = []
        states: list[_State | None] = []
        hopeless: list[_State] = []
        with self._cond:
            for req in requests:
                fut: Future = Future()
                futures.append(fut)
                state = self._admit(req, fut)
                if state is not None and self._hopeless(state):
                    hopeless.append(state)
                    state = None
                states.append(state)
        for state in hopeless:  # dropped at the door: no host work spent on them
            self._fail(state, "deadline", "the queue ahead cannot clear in time")
            shed = getattr(self.policy, "shed", None)  # fair-share policies count it against the app
            if shed is not None:
                with self._cond:
                    shed(state.request.app)
        # Host work outside the lock: preprocess each distinct root input once. An image
        # the model cannot take fails its own request ("invalid"), never the others.
        inputs: dict[int, Any] = {}
        for i, state in enumerate(states):
            if state is None or self._root_pending(state):
                continue
            t0 = time.perf_counter()
            try:
                inputs[i] = state.servable.model.preprocess(state.request.image[None])[0]
            except Exception as exc:
                self._fail(state, "invalid", f"preprocess: {type(exc).__name__}: {exc}")
                states[i] = None
                continue
            self._note_host(state.request.model, (time.perf_counter() - t0) * 1000.0)
        with self._cond:
            for i, state in enumerate(states):
                if state is None:
                    continue
                root = state.servable.model.path_to(state.leaves)[0]
                try:
                    self._enqueue(state, root, inputs.get(i), self._key(state.request))
                except Dropped as exc:
                    self._fail(state, exc.reason, str(exc))
                except Exception as exc:  # preprocessing the entry it was to share
                    self._fail(state, "invalid", f"preprocess: {type(exc).__name__}: {exc}")
            self._cond.notify_all()
        return futures

    def _hopeless(self, state: _State) -> bool:
        """Early drop at admission: even if the queue ahead ran in the largest batches
        the profile allows, this request could not finish its first stage in time. A
        request sharing an input already queued costs nothing and is never hopeless.
        Call under the lock."""
        if not self.share and self.policy.name != "nexus":
            return False
        model = state.servable.model
        root = model.fragments[model.path_to(state.leaves)[0]]
        key = self._key(state.request)
        if key is not None and (root.hash, key) in self._pending:
            return False
        # Ahead of it: higher priorities, its own app's, and those of equal-priority apps
        # served no better than its own lately (as the policy orders them); counting every
        # equal-priority entry would always drop the app whose frames come a little later.
        served = getattr(self.policy, "served", {})
        app, priority = state.request.app, state.request.priority
        mine = served.get(app, 1.0)
        ahead = sum(1 for e in self._queues.get(root.hash, []) if e.priority > priority or (
            e.priority == priority and (e.flow == app or served.get(e.flow, 1.0) <= mine)))
        if ahead == 0:
            return False
        profile = self._current_profile(root.hash)
        b = profile.max_batch
        full, rest = divmod(ahead + 1, b)  # the queue ahead and this request, in the largest batches
        clear_ms = full * profile.latency_ms(b) + (profile.latency_ms(rest) if rest else 0.0)
        deadline, _ = state.stage[root.name]
        return self.clock() + clear_ms > deadline

    def _admit(self, req: Request, fut: Future) -> _State | None:
        version = str(req.version) if req.version is not None else "latest"
        selected = None
        try:
            if self._closing:
                raise LookupError("engine is shutting down")
            ref, selected = self._select(req) if req.version == ADAPTIVE else (req.version, None)
            servable = self.manager.resolve(req.model, ref)
        except LookupError as exc:
            self.metrics.arrived(req.app, req.model, version)
            self.metrics.dropped(req.app, req.model, version, "unavailable")
            fut.set_exception(Dropped("unavailable", str(exc), selected))
            return None
        servable.in_flight += 1
        self._top_priority = max(self._top_priority, req.priority)
        self.metrics.arrived(req.app, req.model, str(servable.version))
        model = servable.model
        leaves = model.leaves_for_labels(list(req.labels) if req.labels is not None else None)
        needed = model.path_to(leaves)
        return _State(req, servable, fut, leaves, set(needed), self._stages(model, leaves, req), selected=selected)

    def _note_host(self, model: str, ms: float) -> None:
        self._host_ms[model] = 0.95 * self._host_ms.get(model, ms) + 0.05 * ms

    def _select(self, req: Request) -> tuple[int, dict | None]:
        """Adaptive selection: the version for this request, by the model's load, and
        the switch it makes (None when the app stays on its version)."""
        versions = self.manager.versions.get(req.model)
        if not versions:
            raise LookupError(f"model {req.model!r} is not loaded")
        rate = self._rates.setdefault(req.model, RateMeter()).add(self.clock())
        options = []
        for v, servable in versions.items():
            quality = servable.model.spec.quality
            profiles = [self._current_profile(f.hash) for f in servable.model.fragments.values()]
            options.append(VersionCost(v, quality if quality is not None else float(v),
                                       capacity(profiles, req.slo_ms, self._host_ms.get(req.model, 0.0))))
        key = (req.app, req.model)
        current = self._selected.get(key)
        chosen = choose_version(options, rate, current)
        if chosen == current:
            return chosen, None
        self._selected[key] = chosen
        event = {"type": "model_selected", "app": req.app, "model": req.model, "from_version": current,
                 "to_version": chosen, "rate_per_s": round(rate, 2), "t_ms": round(self.clock(), 1)}
        self.selection_events.append(event)
        self.metrics.selection(req.app, req.model, chosen)
        return chosen, event

    def _stages(self, model, leaves: list[str], req: Request) -> dict[str, tuple[float, float]]:
        """Each fragment's (deadline, budget). The budget, which sizes batches, is the SLO
        split over the path in proportion to l(1). The deadline, which orders and drops,
        is the request's final one less what the stages after it need: twice their l(1)
        (a batch to wait behind and their own run) and, for a request below the top
        priority in use, `YIELD_SHARE` of its SLO for higher-priority work to go first."""
        sessions = self.manager.sessions
        own = {n: sessions[f.hash].profile.latency_ms(1) for n, f in model.fragments.items()}
        cumulative: dict[str, float] = {}
        for name, frag in model.fragments.items():  # root first
            cumulative[name] = own[name] + (cumulative[frag.parent] if frag.parent else 0.0)
        total = max(cumulative[leaf] for leaf in leaves) or 1.0
        # the last stage must also leave time to hand over and postprocess the result
        final = req.capture_ms + req.slo_ms - HANDOFF_MS - self._host_ms.get(req.model, 0.0)
        yielding = YIELD_SHARE * req.slo_ms if req.priority < self._top_priority else 0.0
        stages = {}
        for name in model.fragments:
            after = max((cumulative[leaf] - cumulative[name] for leaf in leaves
                         if name in model.path_to([leaf])), default=0.0)
            reserve = (2 * after + HANDOFF_MS + yielding) if after > 0 else 0.0
            deadline = final - reserve if req.may_drop else float("inf")
            stages[name] = (deadline, req.slo_ms * own[name] / total)
        return stages

    def _key(self, request: Request) -> Hashable | None:
        return request.input_key if self.share else None

    def _root_pending(self, state: _State) -> bool:
        key = self._key(state.request)
        if key is None:
            return False
        root = state.servable.model.fragments[state.servable.model.path_to(state.leaves)[0]]
        with self._cond:
            return (root.hash, key) in self._pending

    def _enqueue(self, state: _State, fragment: str, value: Any, key: Hashable | None) -> None:
        frag = state.servable.model.fragments[fragment]
        if key is not None and (frag.hash, key) in self._pending:
            self._pending[(frag.hash, key)].subscribe(state, fragment)
            return
        if value is None:  # the entry it was to share has run meanwhile: compute it now
            value = state.servable.model.preprocess(state.request.image[None])[0]
        queue = self._queues.setdefault(frag.hash, [])
        if len(queue) >= self.max_queue:
            raise Dropped("overloaded", f"queue of {self.manager.sessions[frag.hash].label} is full")
        self._next_id += 1
        entry = _Entry(self._next_id, frag.hash, key, value, self.clock(), [], downstream=frag.parent is not None)
        entry.subscribe(state, fragment)
        queue.append(entry)
        if key is not None:
            self._pending[(frag.hash, key)] = entry

    # -- the loop: schedule -> execute -> update ------------------------------------------------
    def _loop(self) -> None:
        while True:
            try:
                with self._cond:
                    plan, batch, dropped = self._schedule()
            except Exception:  # a scheduling bug must not strand every waiting request
                log.exception("scheduler failed; failing the queued requests")
                with self._cond:
                    stranded = self._take({e.item_id: "error" for q in self._queues.values() for e in q})
                for entry, reason in stranded:
                    self._drop_entry(entry, reason, "scheduler failure")
                continue
            if plan is None:
                return
            for entry, reason in dropped:
                self._drop_entry(entry, reason)
            if batch:
                self._execute(plan.session, batch)

    def _schedule(self) -> tuple[Plan | None, list[_Entry], list[tuple[_Entry, str]]]:
        """Under the lock: wait for work, plan, and take the plan's entries off the queues."""
        while True:
            if self._closing and not any(self._queues.values()):
                return None, [], []
            if self.share.due():  # the guest is owed its share: its step before the next batch
                self._lend(by_share=True)
                continue
            items = {h: [WorkItem(e.item_id, e.arrival_ms, e.deadline_ms, e.budget_ms, e.priority, e.slo_ms,
                                  e.downstream, e.flow) for e in q]
                     for h, q in self._queues.items() if q}
            profiles = {h: self._current_profile(h) for h in items}
            plan = self.policy.plan(items, profiles, self.clock()) if items else Plan()
            dropped = self._take(dict(plan.dropped))
            batch: list[_Entry] = []
            if plan.session is not None:
                wanted = set(plan.batch)
                candidates = [e for e in self._queues[plan.session] if e.item_id in wanted]
                order = {item_id: i for i, item_id in enumerate(plan.batch)}
                candidates.sort(key=lambda e: order[e.item_id])
                shape = candidates[0].shape()  # only inputs of one shape stack into a batch
                batch = [e for e in candidates if e.shape() == shape]
                self._take({e.item_id: "" for e in batch})
            for h, q in self._queues.items():
                self.metrics.queue_depth.labels(h[:12]).set(len(q))
            if batch or dropped:
                return plan, batch, dropped
            timeout = None
            if plan.wait_until_ms is not None:
                timeout = max(0.0, (plan.wait_until_ms - self.clock()) / 1000.0)
            if self.share.fits_in(None if timeout is None else timeout * 1000.0):
                self._lend(by_share=False)  # vision's slack: the guest's step costs it nothing
                continue
            self._cond.wait(timeout if timeout is not None else 0.5)

    def _current_profile(self, session: str):
        """The stored profile scaled by what serving shows: the observed/profiled latency
        ratio, plus two of its standard deviations (plan for the slow batches too)."""
        profile = self.manager.sessions[session].profile
        mean, var = self._slowed(session)
        factor = mean + 2.0 * var ** 0.5
        return profile if abs(factor - 1.0) < 0.02 else profile.scaled(factor)

    def _slowed(self, session: str) -> tuple[float, float]:
        """The observed/profiled latency ratio (mean, variance), fading back to the profile
        while the session runs nothing: a slowdown is learnt only from batches that run,
        so a session whose every request is dropped as hopeless under a slow spell would
        otherwise never learn that the spell has passed."""
        mean, var, at = self._slowdown.get(session, (1.0, 0.0, 0.0))
        kept = math.exp(-max(0.0, self.clock() - at) / SLOWDOWN_FADE_MS)
        return 1.0 + (mean - 1.0) * kept, var * kept

    def _take(self, ids: dict[int, str]) -> list[tuple[_Entry, str]]:
        taken = []
        if not ids:
            return taken
        for h, q in self._queues.items():
            keep = []
            for e in q:
                if e.item_id in ids:
                    taken.append((e, ids[e.item_id]))
                    if e.key is not None:
                        self._pending.pop((h, e.key), None)
                else:
                    keep.append(e)
            self._queues[h] = keep
        return taken

    def _execute(self, session: str, batch: list[_Entry]) -> None:
        info = self.manager.sessions.get(session)
        frag = batch[0].subscribers[0][0].servable.model.fragments[batch[0].subscribers[0][1]]
        started = time.perf_counter()
        try:
            with self.device_turn:  # an LLM step in progress finishes first, then vision runs
                out = frag.run(frag.collate([e.input for e in batch]))
                if self.device.startswith("cuda"):
                    import torch

                    torch.cuda.synchronize()
            outputs = frag.split(out, len(batch))
        except Exception as exc:  # a failed batch fails its members, and only them
            log.exception("fragment %s failed on a batch of %d", info.label if info else session[:12], len(batch))
            for entry in batch:
                self._drop_entry(entry, "error", f"{type(exc).__name__}: {exc}")
            return
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        self._busy_ms += elapsed_ms
        with self._cond:
            self.share.vision_ran(elapsed_ms)
        self.metrics.device_seconds.labels("vision").inc(elapsed_ms / 1000.0)
        if info is not None and self.adapt_profiles:
            ratio = min(4.0, max(0.5, elapsed_ms / max(info.profile.latency_ms(len(batch)), 1e-3)))
            mean, var = self._slowdown.get(session, (ratio, 0.0, 0.0))[:2]
            mean = 0.9 * mean + 0.1 * ratio
            self._slowdown[session] = (mean, 0.9 * var + 0.1 * (ratio - mean) ** 2, self.clock())
        self.policy.feedback(session, len(batch), elapsed_ms, min(e.budget_ms for e in batch))
        self.metrics.batch(info.label.split("/")[0] if info else "?", frag.name, len(batch))
        ready: list[_State] = []
        with self._cond:
            for entry, value in zip(batch, outputs):
                for state, name in entry.subscribers:
                    if state.finished:
                        continue
                    model = state.servable.model
                    if name in state.leaves:
                        state.outputs[name] = value
                    for child, cf in model.fragments.items():
                        if cf.parent == name and child in state.needed:
                            try:
                                self._enqueue(state, child, value, entry.key)
                            except Dropped as exc:
                                self._fail(state, exc.reason, str(exc))
                    if not state.finished and len(state.outputs) == len(state.leaves):
                        state.finished = True
                        ready.append(state)
            self._cond.notify_all()
        for state in ready:
            self._post.submit(self._finish, state)

    def _finish(self, state: _State) -> None:
        req = state.request
        model = state.servable.model
        width, height = req.image.shape[1], req.image.shape[0]
        t0 = time.perf_counter()
        try:
            outputs = {leaf: model.postprocess(leaf, state.outputs[leaf], (width, height)) for leaf in state.leaves}
            self._note_host(req.model, (time.perf_counter() - t0) * 1000.0)
        except Exception as exc:
            log.exception("postprocessing %s failed", model.spec.name)
            self._fail(state, "error", f"postprocess: {exc}")
            return
        latency = self.clock() - req.capture_ms
        version = str(state.servable.version)
        self.metrics.completed(req.app, req.model, version, latency, req.slo_ms)
        with self._cond:
            self.manager.release(state.servable)
        state.future.set_result(Result(req.app, req.model, state.servable.version, outputs, latency,
                                       latency <= req.slo_ms, state.selected))

    def _drop_entry(self, entry: _Entry, reason: str, detail: str = "") -> None:
        for state, _ in entry.subscribers:
            self._fail(state, reason, detail)

    def _fail(self, state: _State, reason: str, detail: str = "") -> None:
        with self._cond:
            if state.future.done() or (state.finished and reason != "error"):
                return
            state.finished = True
            self.manager.release(state.servable)
        req = state.request
        self.metrics.dropped(req.app, req.model, str(state.servable.version), reason)
        state.future.set_exception(Dropped(reason, detail, state.selected))

    # -- reports ------------------------------------------------------------------------------------
    def profiles(self) -> dict[str, dict]:
        with self._cond:
            return {info.label: info.profile.to_dict() for info in self.manager.sessions.values()}

    def load_report(self) -> dict:
        with self._cond:
            elapsed = max(1.0, self.clock() - self._started_ms)
            return {"device": self.device, "busy_fraction": round(self._busy_ms / elapsed, 4),
                    "guest": self.share.report(),
                    "queues": {self.manager.sessions[h].label: len(q) for h, q in self._queues.items()
                               if h in self.manager.sessions}}

    def models(self) -> dict:
        return self.manager.describe()

    def close(self, drain: bool = True, timeout_s: float = 30.0) -> None:
        with self._cond:
            self._closing = True
            if not drain:
                dropped = self._take({e.item_id: "shutdown" for q in self._queues.values() for e in q})
            else:
                dropped = []
            self._cond.notify_all()
        for entry, reason in dropped:
            self._drop_entry(entry, reason)
        self._thread.join(timeout_s)
        self._post.shutdown(wait=True)

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

