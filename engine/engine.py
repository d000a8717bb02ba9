"""The engine: one per device. Requests in, results out; schedule -> execute -> update.

Its boundary is what a cluster backend exposes, plain data in and out: `submit_many`
(engine/requests.py), the model verbs (`load`, `ensure_loaded`, `unload`, `reload`,
`set_label`, `labels`, `versions`, `fragment_profiles`), the reports (`profiles`,
`load_report`, `models`, `selections`, `metrics`), `close`, and `arbiter`, the device
arbiter a guest (the LLM) takes its turns from (engine/arbiter.py).

A request names a model (and version or label), one frame and the labels it needs.
Its path is the fragments from the model's root to the heads that detect those
labels; each fragment hash is a session with one queue (engine/queues.py), where
requests on the same input share one entry. Deadlines and the early drop at
admission are engine/deadlines.py's, plans the policy's (engine/scheduler.py),
versions the model manager's (engine/servables.py). A request that may not be
dropped (an offline run's) has no deadline to schedule by: it waits its turn, and its
latency is still measured against its SLO. Host work is kept off the device loop:
preprocessing runs on the submitting thread, postprocessing on a pool.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

from engine.admission import Admission
from engine.arbiter import DeviceArbiter
from engine.metrics import EngineMetrics
from engine.observed import ObservedProfiles
from engine.profiles import Profile
from engine.queues import Admitted, QueueEntry, QueueFull, SessionQueues
from engine.repository import ModelRepository
from engine.requests import Dropped, Request, Result
from engine.scheduler import Plan, Policy, make_policy
from engine.servables import ModelManager
from streams.clock import monotonic_ms

log = logging.getLogger("vigil.engine")


class Engine:
    def __init__(self, repository: ModelRepository, device: str = "cpu", policy: str | Policy = "nexus",
                 clock: Callable[[], float] = monotonic_ms, max_queue: int = 4096, postprocess_workers: int = 1,
                 share: bool = True, adapt_profiles: bool = True) -> None:
        """`share=False` turns off prefix sharing: each version keeps its own fragments and
        equal inputs are not merged (how TF Serving or Clipper would serve the models).
        `adapt_profiles=False` plans with the stored profiles as they are, never scaled
        by the latencies observed while serving."""
        self.repository = repository
        self.device = device
        self.share = share
        self.clock = clock
        self.policy = make_policy(policy) if isinstance(policy, str) else policy
        self.metrics = EngineMetrics()
        self.manager = ModelManager(repository, device, share=share)  # inside the engine; tests inspect it
        self._cond = threading.Condition(self.manager.lock)
        self.arbiter = DeviceArbiter(self._cond, self.metrics)
        self.queues = SessionQueues(max_queue)
        self.observed = ObservedProfiles(clock, adapt_profiles)
        self.admission = Admission(self.manager, self.queues, self.observed, self.policy, self.metrics, share, clock)
        self._closing = False
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
        if not self.versions(name):
            self.load(name)

    def unload(self, name: str, version: int | None = None) -> list[int]:
        return self.manager.unload(name, version)

    def reload(self, name: str) -> dict[str, list[int]]:
        out = self.manager.reload(name)
        self._mark_random(name)
        return out

    def set_label(self, name: str, label: str, version: int) -> None:
        self.manager.set_label(name, label, version)

    def labels(self, name: str, version: int | str | None = None) -> tuple[str, ...]:
        """The class labels of the loaded version a request with this version would get
        (LookupError when none is)."""
        with self._cond:
            return tuple(self.manager.resolve(name, version).model.spec.labels)

    def versions(self, name: str) -> list[int]:
        with self._cond:
            return sorted(self.manager.versions.get(name, {}))

    def fragment_profiles(self, name: str, version: int | str | None = None) -> list[Profile]:
        """The stored profiles of a loaded version's fragments, root first."""
        with self._cond:
            model = self.manager.resolve(name, version).model
            return [self.manager.sessions[f.hash].profile for f in model.fragments.values()]

    def _mark_random(self, name: str) -> None:
        with self._cond:
            for v, s in self.manager.versions.get(name, {}).items():
                self.metrics.random_weights.labels(name, str(v)).set(1 if s.model.random_weights else 0)

    @property
    def ready(self) -> bool:
        return self.manager.loading == 0

    # -- requests -----------------------------------------------------------------------------------
    def submit(self, request: Request) -> Future:
        return self.submit_many([request])[0]

    def submit_many(self, requests: list[Request]) -> list[Future]:
        """Submit together so requests on the same input share fragments reliably."""
        futures = [Future() for _ in requests]
        with self._cond:
            admitted = [self.admission.admit(req, fut, self._closing) for req, fut in zip(requests, futures)]
            doomed = [a for a in admitted if a is not None and self.admission.hopeless(a)]
        for a in doomed:  # dropped at the door: no host work spent on them
            self._fail(a, "deadline", "the queue ahead cannot clear in time")
            shed = getattr(self.policy, "shed", None)  # fair-share policies count it against the app
            if shed is not None:
                with self._cond:
                    shed(a.request.app)
        admitted = [None if a in doomed else a for a in admitted]
        # Host work outside the lock: preprocess each distinct root input once. An image
        # the model cannot take fails its own request ("invalid"), never the others.
        inputs: dict[int, Any] = {}
        for i, a in enumerate(admitted):
            if a is None or self._queued(a, a.root) is not None:
                continue
            t0 = time.perf_counter()
            try:
                inputs[i] = a.servable.model.preprocess(a.request.image[None])[0]
            except Exception as exc:
                self._fail(a, "invalid", f"preprocess: {type(exc).__name__}: {exc}")
                admitted[i] = None
                continue
            self.observed.host_ran(a.request.model, (time.perf_counter() - t0) * 1000.0)
        with self._cond:
            for i, a in enumerate(admitted):
                if a is None:
                    continue
                try:
                    self._enqueue(a, a.root, inputs.get(i))
                except Dropped as exc:
                    self._fail(a, exc.reason, str(exc))
                except Exception as exc:  # preprocessing the entry it was to share
                    self._fail(a, "invalid", f"preprocess: {type(exc).__name__}: {exc}")
            self._cond.notify_all()
        return futures

    def _queued(self, a: Admitted, fragment: str) -> QueueEntry | None:
        with self._cond:
            return self.queues.queued(a.servable.model.fragments[fragment].hash, self.admission.key(a.request))

    def _enqueue(self, a: Admitted, fragment: str, value: Any) -> None:
        """Under the lock: subscribe to the entry of this input, or queue a new one."""
        entry = self._queued(a, fragment)
        if entry is None:
            frag = a.servable.model.fragments[fragment]
            if value is None:  # the entry it was to share has run meanwhile: compute it now
                value = a.servable.model.preprocess(a.request.image[None])[0]
            try:
                entry = self.queues.add(frag.hash, self.admission.key(a.request), value, self.clock(),
                                        downstream=frag.parent is not None)
            except QueueFull:
                raise Dropped("overloaded", f"queue of {self.manager.sessions[frag.hash].label} is full") from None
        entry.subscribe(a, fragment)

    # -- the loop: schedule -> execute -> update ------------------------------------------------
    def _loop(self) -> None:
        while True:
            try:
                with self._cond:
                    plan, batch, dropped = self._schedule()
            except Exception:  # a scheduling bug must not strand every waiting request
                log.exception("scheduler failed; failing the queued requests")
                with self._cond:
                    dropped = self.queues.take_all("error")
                for entry, reason in dropped:
                    self._drop_entry(entry, reason, "scheduler failure")
                continue
            if plan is None:
                return
            for entry, reason in dropped:
                self._drop_entry(entry, reason)
            if batch:
                self._execute(plan.session, batch)

    def _schedule(self) -> tuple[Plan | None, list[QueueEntry], list[tuple[QueueEntry, str]]]:
        """Under the lock: wait for work, plan, and take the plan's entries off the queues."""
        while True:
            if self._closing and self.queues.empty():
                return None, [], []
            if self.arbiter.owed():  # the guest's step before the next batch
                self.arbiter.lend(by_share=True)
                continue
            work = self.queues.work()
            profiles = {s: self.admission.profile(s) for s in work}
            plan = self.policy.plan(work, profiles, self.clock()) if work else Plan()
            dropped = self.queues.take(dict(plan.dropped))
            batch = self.queues.take_batch(plan.session, plan.batch) if plan.session is not None else []
            for s, n in self.queues.depths().items():
                self.metrics.queue_depth.labels(s[:12]).set(n)
            if batch or dropped:
                return plan, batch, dropped
            timeout_ms = None if plan.wait_until_ms is None else max(0.0, plan.wait_until_ms - self.clock())
            if self.arbiter.fits_in(timeout_ms):
                self.arbiter.lend(by_share=False)  # vision's slack: the guest's step costs it nothing
                continue
            self._cond.wait(timeout_ms / 1000.0 if timeout_ms is not None else 0.5)

    def _execute(self, session: str, batch: list[QueueEntry]) -> None:
        info = self.manager.sessions.get(session)
        first, name = batch[0].subscribers[0]
        frag = first.servable.model.fragments[name]
        started = time.perf_counter()
        try:
            with self.arbiter.batch():
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
        if info is not None:
            self.observed.batch_ran(session, info.profile, len(batch), elapsed_ms)
        self.policy.feedback(session, len(batch), elapsed_ms, min(e.budget_ms for e in batch))
        self.metrics.batch(info.label.split("/")[0] if info else "?", frag.name, len(batch))
        ready: list[Admitted] = []
        with self._cond:
            for entry, value in zip(batch, outputs):
                for a, name in entry.subscribers:
                    if not a.finished and self._advance(a, name, value):
                        ready.append(a)
            self._cond.notify_all()
        for a in ready:
            self._post.submit(self._finish, a)

    def _advance(self, a: Admitted, fragment: str, value: Any) -> bool:
        """Under the lock: a fragment's output reaches its request, as a result or as the
        input of the next fragments on its path. True when all its heads are done."""
        model = a.servable.model
        if fragment in a.leaves:
            a.outputs[fragment] = value
        for child, frag in model.fragments.items():
            if frag.parent == fragment and child in a.needed:
                try:
                    self._enqueue(a, child, value)
                except Dropped as exc:
                    self._fail(a, exc.reason, str(exc))
        if not a.finished and len(a.outputs) == len(a.leaves):
            a.finished = True
            return True
        return False

    def _finish(self, a: Admitted) -> None:
        req, model = a.request, a.servable.model
        size = (req.image.shape[1], req.image.shape[0])
        t0 = time.perf_counter()
        try:
            outputs = {leaf: model.postprocess(leaf, a.outputs[leaf], size) for leaf in a.leaves}
            self.observed.host_ran(req.model, (time.perf_counter() - t0) * 1000.0)
        except Exception as exc:
            log.exception("postprocessing %s failed", model.spec.name)
            self._fail(a, "error", f"postprocess: {exc}")
            return
        latency = self.clock() - req.capture_ms
        self.metrics.completed(req.app, req.model, str(a.servable.version), latency, req.slo_ms)
        with self._cond:
            self.manager.release(a.servable)
        a.future.set_result(Result(req.app, req.model, a.servable.version, outputs, latency,
                                   latency <= req.slo_ms, a.selected))

    def _drop_entry(self, entry: QueueEntry, reason: str, detail: str = "") -> None:
        for a, _ in entry.subscribers:
            self._fail(a, reason, detail)

    def _fail(self, a: Admitted, reason: str, detail: str = "") -> None:
        with self._cond:
            if a.future.done() or (a.finished and reason != "error"):
                return
            a.finished = True
            self.manager.release(a.servable)
        req = a.request
        self.metrics.dropped(req.app, req.model, str(a.servable.version), reason)
        a.future.set_exception(Dropped(reason, detail, a.selected))

    # -- reports ------------------------------------------------------------------------------------
    def profiles(self) -> dict[str, dict]:
        with self._cond:
            return {info.label: info.profile.to_dict() for info in self.manager.sessions.values()}

    def load_report(self) -> dict:
        with self._cond:
            elapsed = max(1.0, self.clock() - self._started_ms)
            return {"device": self.device, "busy_fraction": round(self._busy_ms / elapsed, 4),
                    "guest": self.arbiter.report(),
                    "queues": {self.manager.sessions[s].label: n for s, n in self.queues.depths().items()
                               if s in self.manager.sessions}}

    def models(self) -> dict:
        return self.manager.describe()

    def selections(self) -> list[dict]:
        """Every adaptive-selection switch (the newest 10,000)."""
        with self._cond:
            return list(self.admission.selector.switches)

    def close(self, drain: bool = True, timeout_s: float = 30.0) -> None:
        with self._cond:
            self._closing = self.arbiter.closing = True
            dropped = [] if drain else self.queues.take_all("shutdown")
            self._cond.notify_all()
        for entry, reason in dropped:
            self._drop_entry(entry, reason)
        self._thread.join(timeout_s)
        self._post.shutdown(wait=True)

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
