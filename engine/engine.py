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
batch at a time on its share of the cores: one lane on a GPU, several on a CPU. The
state they share has one owner, engine/core.py's `EngineCore`: a lane's step is its
`schedule`, the execution here (without the lock), then its `update`.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

from core.clock import monotonic_ms
from engine.core import Drops, EngineCore, Step
from engine.lanes import lane_threads, resolve_lanes, use_threads
from engine.metrics import EngineMetrics
from engine.model_verbs import ModelVerbs
from engine.queues import Admitted
from engine.requests import Dropped, Request, Result
from engine.scheduler import Policy, make_policy
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
        self.core = EngineCore(ModelManager(repository, device, threads=self.lane_threads, share=share), self.policy,
                               self.metrics, clock, max_queue, share, adapt_profiles, self.lanes)
        # the core's, named here for the model verbs, the LLM's turns and tests
        self.manager = self.core.manager
        self.observed = self.core.observed
        self.arbiter = self.core.arbiter
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
        admitted, doomed = self.core.admit(requests, futures)
        for a in doomed:  # dropped at the door: no host work spent on them
            self._report_drop(a, "deadline", "the queue ahead cannot clear in time")
        inputs = self.core.root_inputs(admitted, self._fail)  # host work, outside the lock
        self.core.enqueue(admitted, inputs, self._fail)
        return futures

    # -- a lane: schedule -> execute -> update ------------------------------------------------------
    def _loop(self) -> None:
        use_threads(self.lane_threads)
        while True:
            try:
                step = self.core.schedule()
            except Exception:  # a scheduling bug must not strand every waiting request
                log.exception("scheduler failed; failing the queued requests")
                self._drop_entries(self.core.take_all("error"), "scheduler failure")
                continue
            if step is None:
                return
            self._drop_entries(step.dropped)
            if step.batch:
                self._execute(step)

    def _execute(self, step: Step) -> None:
        session, batch, info = step.plan.session, step.batch, step.info
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
        ready = self.core.update(step, outputs, elapsed_ms, self._fail)
        if ready:
            self._post.submit(self._finish, ready)

    # -- results: postprocessing off the lanes ------------------------------------------------------
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
            self.core.host_ran(a.request.model, host_ms[id(a)])
        self.core.release(done)
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

    def _drop_entries(self, dropped: Drops, detail: str = "") -> None:
        """Fail every request on these entries."""
        for a, reason in self.core.claim_entries(dropped):
            self._report_drop(a, reason, detail)

    def _fail(self, a: Admitted, reason: str, detail: str = "") -> None:
        if self.core.claim(a, reason):
            self._report_drop(a, reason, detail)

    def _report_drop(self, a: Admitted, reason: str, detail: str) -> None:
        req = a.request
        self.metrics.dropped(req.app, req.model, str(a.servable.version), reason)
        a.future.set_exception(Dropped(reason, detail, a.selected))

    # -- reports ------------------------------------------------------------------------------------
    def load_report(self) -> dict:
        return {"device": self.device, "lanes": self.lanes, **self.core.load_report(self._started_ms, self.lanes)}

    def close(self, drain: bool = True, timeout_s: float = 30.0) -> None:
        self._drop_entries(self.core.close(drain))
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
