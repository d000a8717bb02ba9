"""The engine: one per device. Requests in, results out; schedule -> execute -> update.

Its boundary is what a cluster backend exposes, plain data in and out: `submit_many`
(engine/requests.py), the model verbs and reports of engine/model_verbs.py (`load`,
`unload`, `labels`, `versions`, `profiles`, ...), `load_report`, `metrics`, `close`,
and `arbiter`, the device arbiter a guest (the LLM) takes its turns from
(engine/arbiter.py).

A request names a model (and version or label), one frame and the labels it needs.
Its path is the fragments from the model's root to the heads that detect those
labels; each fragment hash is a session with one queue (engine/queues.py), where
requests on the same input share one entry (engine/paths.py). Deadlines and the early
drop at admission are engine/deadlines.py's, plans the policy's (engine/scheduler.py),
versions the model manager's (engine/servables.py). A request that may not be
dropped (an offline run's) has no deadline to schedule by: it waits its turn, and its
latency is still measured against its SLO. Host work is kept off the device loop:
preprocessing runs on the submitting thread, postprocessing on a pool.

The loop runs in `lanes` threads (engine/lanes.py), each planning and running one
batch at a time on its share of the cores: one lane on a GPU, several on a CPU.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

from core.clock import monotonic_ms
from engine.admission import Admission
from engine.arbiter import DeviceArbiter
from engine.lanes import lane_threads, resolve_lanes, use_threads
from engine.metrics import EngineMetrics
from engine.model_verbs import ModelVerbs
from engine.observed import ObservedProfiles
from engine.paths import Paths
from engine.queues import Admitted, QueueEntry, SessionQueues
from engine.requests import Dropped, Request, Result
from engine.scheduler import Plan, Policy, make_policy
from engine.servables import ModelManager
from models.repository import ModelRepository

log = logging.getLogger("vigil.engine")


class Engine(ModelVerbs):
    def __init__(self, repository: ModelRepository, device: str = "cpu", policy: str | Policy = "nexus",
                 clock: Callable[[], float] = monotonic_ms, max_queue: int = 4096, postprocess_workers: int = 1,
                 share: bool = True, adapt_profiles: bool = True, lanes: int | None = 1) -> None:
        """`share=False` turns off prefix sharing: each version keeps its own fragments and
        equal inputs are not merged (how TF Serving or Clipper would serve the models).
        `adapt_profiles=False` plans with the stored profiles as they are, never scaled
        by the latencies observed while serving. `lanes`: batches run at once (None:
        what suits the device, engine/lanes.py)."""
        self.repository = repository
        self.device = device
        self.lanes = resolve_lanes(device, lanes)
        self.lane_threads = lane_threads(device, self.lanes)
        self.share = share
        self.clock = clock
        self.policy = make_policy(policy) if isinstance(policy, str) else policy
        self.metrics = EngineMetrics()
        # inside the engine; tests inspect it
        self.manager = ModelManager(repository, device, threads=self.lane_threads, share=share)
        self._cond = threading.Condition(self.manager.lock)
        self.arbiter = DeviceArbiter(self._cond, self.metrics, self.lanes)
        self.queues = SessionQueues(max_queue)
        self.observed = ObservedProfiles(adapt_profiles)
        self.admission = Admission(self.manager, self.queues, self.observed, self.policy, self.metrics, share, clock,
                                   self.lanes)
        self.paths = Paths(self._cond, self.manager, self.queues, self.admission, self.observed, clock)
        self._closing = False
        self._busy_ms = 0.0
        self._started_ms = clock()
        self._post = ThreadPoolExecutor(postprocess_workers, thread_name_prefix="engine-post")
        self._threads = [threading.Thread(target=self._loop, name=f"engine-{device}-{i}", daemon=True)
                         for i in range(self.lanes)]
        for thread in self._threads:
            thread.start()

    # -- requests -----------------------------------------------------------------------------------
    def submit(self, request: Request) -> Future:
        return self.submit_many([request])[0]

    def submit_many(self, requests: list[Request]) -> list[Future]:
        """Submit together so requests on the same input share fragments reliably."""
        futures = [Future() for _ in requests]
        shed = getattr(self.policy, "shed", None)  # fair-share policies count a drop at the door
        # one hold of the lock for the whole block: with many streams, each acquisition
        # is a wait behind the others' (and their wait for the GIL)
        with self._cond:
            admitted = [self.admission.admit(req, fut, self._closing) for req, fut in zip(requests, futures)]
            doomed = [a for a in admitted if a is not None and self.admission.hopeless(a)]
            for a in doomed:
                self._finished(a)
                if shed is not None:
                    shed(a.request.app)
        for a in doomed:  # dropped at the door: no host work spent on them
            self._report_drop(a, "deadline", "the queue ahead cannot clear in time")
        admitted = [None if a in doomed else a for a in admitted]
        inputs = self.paths.root_inputs(admitted, self._fail)  # host work, outside the lock
        with self._cond:
            for i, a in enumerate(admitted):
                if a is None:
                    continue
                try:
                    self.paths.enqueue(a, a.root, inputs.get(i))
                except Dropped as exc:
                    self._fail(a, exc.reason, str(exc))
                except Exception as exc:  # preprocessing the entry it was to share
                    self._fail(a, "invalid", f"preprocess: {type(exc).__name__}: {exc}")
            self._cond.notify_all()
        return futures

    # -- the loop: schedule -> execute -> update ------------------------------------------------
    def _loop(self) -> None:
        use_threads(self.lane_threads)
        while True:
            try:
                with self._cond:
                    plan, batch, dropped = self._schedule()
            except Exception:  # a scheduling bug must not strand every waiting request
                log.exception("scheduler failed; failing the queued requests")
                with self._cond:
                    dropped = self.queues.take_all("error")
                self._drop_entries(dropped, "scheduler failure")
                continue
            if plan is None:
                return
            self._drop_entries(dropped)
            if batch:
                self._execute(plan.session, batch)

    def _schedule(self) -> tuple[Plan | None, list[QueueEntry], list[tuple[QueueEntry, str]]]:
        """Under the lock: wait for work, plan, and take the plan's entries off the queues."""
        while True:
            if self._closing and self.queues.empty():
                return None, [], []
            if self.arbiter.lent():  # another lane lent the device: no batch until the step ends
                self._cond.wait(0.5)
                continue
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
            if batch and plan.probe:
                self._count_probe(plan.session, batch)
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
            self._drop_entries([(entry, "error") for entry in batch], f"{type(exc).__name__}: {exc}")
            return
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        self.metrics.batch(info.label.split("/")[0] if info else "?", frag.name, len(batch))
        ready: list[Admitted] = []
        with self._cond:
            self._busy_ms += elapsed_ms
            if info is not None:
                self.observed.batch_ran(session, info.profile, len(batch), elapsed_ms)
                self.metrics.profile_factor.labels(session[:12]).set(round(self.observed.factor(session), 3))
            self.policy.feedback(session, len(batch), elapsed_ms, min(e.budget_ms for e in batch))
            for entry, value in zip(batch, outputs):
                for a, name in entry.subscribers:
                    if not a.finished and self.paths.advance(a, name, value, self._fail):
                        ready.append(a)
            self._cond.notify_all()
        if ready:
            self._post.submit(self._finish, ready)

    def _count_probe(self, session: str, batch: list[QueueEntry]) -> None:
        first, name = batch[0].subscribers[0]
        self.metrics.probe(first.servable.model.spec.name, name)

    def _finish(self, ready: list[Admitted]) -> None:
        """Postprocess the requests a batch completed, each leaf of a model for all of
        them at once (`postprocess_many`), and hand out their results."""
        groups: dict[tuple[int, str], list[Admitted]] = {}
        for a in ready:
            for leaf in a.leaves:
                groups.setdefault((id(a.servable.model), leaf), []).append(a)
        outputs: dict[int, dict[str, Any]] = {id(a): {} for a in ready}
        host_ms = dict.fromkeys(outputs, 0.0)  # each request's share of its leaves' postprocessing
        failed: set[int] = set()
        for (_, leaf), members in groups.items():
            model = members[0].servable.model
            t0 = time.perf_counter()
            try:
                found = model.postprocess_many(leaf, [a.outputs[leaf] for a in members],
                                               [_frame_size(a) for a in members])
            except Exception:  # one bad output: each item on its own, so only the bad ones fail
                found = [self._postprocess_one(a, leaf, failed) for a in members]
            per_item_ms = (time.perf_counter() - t0) * 1000.0 / len(members)
            for a, value in zip(members, found):
                outputs[id(a)][leaf] = value
                host_ms[id(a)] += per_item_ms
        done = [a for a in ready if id(a) not in failed]
        for a in done:
            self.observed.host_ran(a.request.model, host_ms[id(a)])
        with self._cond:
            for a in done:
                self.manager.release(a.servable)
        for a in done:
            req = a.request
            latency = self.clock() - req.capture_ms
            self.metrics.completed(req.app, req.model, str(a.servable.version), latency, req.slo_ms)
            a.future.set_result(Result(req.app, req.model, a.servable.version, outputs[id(a)], latency,
                                       latency <= req.slo_ms, a.selected))

    def _postprocess_one(self, a: Admitted, leaf: str, failed: set[int]) -> Any:
        """One item's leaf; when it fails, the request fails as an error and joins `failed`."""
        if id(a) in failed:
            return None
        try:
            return a.servable.model.postprocess(leaf, a.outputs[leaf], _frame_size(a))
        except Exception as exc:
            log.exception("postprocessing %s failed", a.servable.model.spec.name)
            self._fail(a, "error", f"postprocess: {exc}")
            failed.add(id(a))
            return None

    def _drop_entries(self, dropped: list[tuple[QueueEntry, str]], detail: str = "") -> None:
        """Fail every request on these entries, under one hold of the lock (a plan under
        overload drops many)."""
        if not dropped:
            return
        failed: dict[int, tuple[Admitted, str]] = {}  # a request on two dropped entries fails once
        with self._cond:
            for entry, reason in dropped:
                for a, _ in entry.subscribers:
                    if id(a) not in failed and self._may_fail(a, reason):
                        self._finished(a)
                        failed[id(a)] = (a, reason)
        for a, reason in failed.values():
            self._report_drop(a, reason, detail)

    def _fail(self, a: Admitted, reason: str, detail: str = "") -> None:
        with self._cond:
            if not self._may_fail(a, reason):
                return
            self._finished(a)
        self._report_drop(a, reason, detail)

    @staticmethod
    def _may_fail(a: Admitted, reason: str) -> bool:
        """Not failed yet, nor finished (an error fails even a finished one)."""
        return not a.future.done() and (not a.finished or reason == "error")

    def _finished(self, a: Admitted) -> None:
        """Under the lock: `a` is done with its servable."""
        a.finished = True
        self.manager.release(a.servable)

    def _report_drop(self, a: Admitted, reason: str, detail: str) -> None:
        req = a.request
        self.metrics.dropped(req.app, req.model, str(a.servable.version), reason)
        a.future.set_exception(Dropped(reason, detail, a.selected))

    # -- reports ------------------------------------------------------------------------------------
    def load_report(self) -> dict:
        with self._cond:
            elapsed = max(1.0, self.clock() - self._started_ms)
            return {"device": self.device, "lanes": self.lanes,
                    "busy_fraction": round(self._busy_ms / elapsed / self.lanes, 4),
                    "guest": self.arbiter.report(),
                    "queues": {self.manager.sessions[s].label: n for s, n in self.queues.depths().items()
                               if s in self.manager.sessions}}

    def close(self, drain: bool = True, timeout_s: float = 30.0) -> None:
        with self._cond:
            self._closing = self.arbiter.closing = True
            dropped = [] if drain else self.queues.take_all("shutdown")
            self._cond.notify_all()
        self._drop_entries(dropped)
        for thread in self._threads:
            thread.join(timeout_s)
        self._post.shutdown(wait=True)

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _frame_size(a: Admitted) -> tuple[int, int]:
    """(width, height) of the request's frame, as postprocessing maps boxes back to it."""
    return a.request.image.shape[1], a.request.image.shape[0]
