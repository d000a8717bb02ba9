"""The engine's state and its one owner.

`EngineCore` holds everything the lanes, the submitting threads and the model verbs
share: the model manager (engine/servables.py), the session queues (engine/queues.py),
admission (engine/admission.py), the requests' paths (engine/paths.py), the observed
profiles (engine/observed.py), the policy (engine/scheduler.py) and the device arbiter
(engine/arbiter.py). They share one lock, the manager's, held as a condition that
lanes wait on. Every method here takes that lock itself, and nothing else calls the
methods of those objects that need it: their "under the lock" is this class's.

A lane's step is `schedule` (wait for work, plan, take the plan's entries), the
execution (engine/engine.py, without the lock), then `update` (the batch's time
learnt, the policy told, each output moved along its requests' paths). Host work
(preprocessing, postprocessing) stays outside the lock: `root_inputs` checks what is
queued under it and preprocesses after.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable

from engine.admission import Admission
from engine.arbiter import DeviceArbiter
from engine.metrics import EngineMetrics
from engine.observed import ObservedProfiles
from engine.paths import Fail, Paths
from engine.queues import Admitted, QueueEntry, SessionQueues
from engine.requests import Dropped, Request
from engine.scheduler import Plan, Policy
from engine.servables import ModelManager, SessionInfo

Drops = list[tuple[QueueEntry, str]]  # (entry, reason)


@dataclass
class Step:
    """What one lane runs: a plan's batch of one session, and the entries it dropped."""

    plan: Plan
    batch: list[QueueEntry] = field(default_factory=list)
    dropped: Drops = field(default_factory=list)
    info: SessionInfo | None = None  # the batch's session, as it was when planned


class EngineCore:
    def __init__(self, manager: ModelManager, policy: Policy, metrics: EngineMetrics, clock: Callable[[], float],
                 max_queue: int, share: bool, adapt_profiles: bool, lanes: int) -> None:
        self.manager, self.policy, self.metrics, self.clock = manager, policy, metrics, clock
        self.lock = threading.Condition(manager.lock)
        self.arbiter = DeviceArbiter(self.lock, metrics, lanes)
        self.queues = SessionQueues(max_queue)
        self.observed = ObservedProfiles(adapt_profiles)
        self.admission = Admission(manager, self.queues, self.observed, policy, metrics, share, clock, lanes)
        self.paths = Paths(manager, self.queues, self.admission, self.observed, clock)
        self.closing = False
        self.busy_ms = 0.0  # device time of every batch run, over all lanes

    # -- requests in -----------------------------------------------------------------------------
    def admit(self, requests: list[Request], futures: list[Future]) -> tuple[list[Admitted | None], list[Admitted]]:
        """Each request on its path (None: refused, its future failed), and those of them
        the early drop refuses (taken off their servables; the caller reports them). One
        hold of the lock for the whole block: with many streams, each acquisition is a
        wait behind the others'."""
        shed = getattr(self.policy, "shed", None)  # fair-share policies count a drop at the door
        with self.lock:
            admitted = [self.admission.admit(req, fut, self.closing) for req, fut in zip(requests, futures)]
            doomed = [a for a in admitted if a is not None and self.admission.hopeless(a)]
            for a in doomed:
                self._finished(a)
                if shed is not None:
                    shed(a.request.app)
        return [None if a in doomed else a for a in admitted], doomed

    def root_inputs(self, admitted: list[Admitted | None], fail: Fail) -> dict[int, Any]:
        """Each distinct root input not queued already, preprocessed once, outside the
        lock (engine/paths.py)."""
        with self.lock:
            todo = [(i, a) for i, a in enumerate(admitted) if a is not None and self.paths.queued(a, a.root) is None]
        return self.paths.preprocess(todo, admitted, fail)

    def enqueue(self, admitted: list[Admitted | None], inputs: dict[int, Any], fail: Fail) -> None:
        with self.lock:
            for i, a in enumerate(admitted):
                if a is None:
                    continue
                try:
                    self.paths.enqueue(a, a.root, inputs.get(i))
                except Dropped as exc:
                    fail(a, exc.reason, str(exc))
                except Exception as exc:  # preprocessing the entry it was to share
                    fail(a, "invalid", f"preprocess: {type(exc).__name__}: {exc}")
            self.lock.notify_all()

    # -- a lane's step: schedule -> (execute) -> update -------------------------------------------
    def schedule(self) -> Step | None:
        """Wait for work, plan, and take the plan's entries off the queues (None: closed
        and drained). Lends the device to the guest (the LLM) when it is owed a step or
        when its step fits in the plan's idle time."""
        with self.lock:
            while True:
                if self.closing and self.queues.empty():
                    return None
                if self.arbiter.lent():  # another lane lent the device: no batch until the step ends
                    self.lock.wait(0.5)
                    continue
                if self.arbiter.owed():  # the guest's step before the next batch
                    self.arbiter.lend(by_share=True)
                    continue
                step = self._plan()
                if step.batch or step.dropped:
                    return step
                wait_ms = None if step.plan.wait_until_ms is None else max(0.0, step.plan.wait_until_ms - self.clock())
                if self.arbiter.fits_in(wait_ms):
                    self.arbiter.lend(by_share=False)  # vision's slack: the guest's step costs it nothing
                    continue
                self.lock.wait(wait_ms / 1000.0 if wait_ms is not None else 0.5)

    def _plan(self) -> Step:
        work = self.queues.work()
        profiles = {s: self.admission.profile(s) for s in work}
        plan = self.policy.plan(work, profiles, self.clock()) if work else Plan()
        dropped = self.queues.take(dict(plan.dropped))
        batch = self.queues.take_batch(plan.session, plan.batch) if plan.session is not None else []
        for s, n in self.queues.depths().items():
            self.metrics.queue_depth.labels(s[:12]).set(n)
        if batch and plan.probe:
            first, name = batch[0].subscribers[0]
            self.metrics.probe(first.servable.model.spec.name, name)
        return Step(plan, batch, dropped, self.manager.sessions.get(plan.session) if batch else None)

    def update(self, step: Step, outputs: list[Any], elapsed_ms: float, fail: Fail) -> list[Admitted]:
        """A batch ran: its time learnt (observed profile, the policy's feedback) and each
        output moved along its requests' paths. The requests it completed."""
        session, batch, info = step.plan.session, step.batch, step.info
        ready: list[Admitted] = []
        with self.lock:
            self.busy_ms += elapsed_ms
            if info is not None:
                self.observed.batch_ran(session, info.profile, len(batch), elapsed_ms)
                self.metrics.profile_factor.labels(session[:12]).set(round(self.observed.factor(session), 3))
            self.policy.feedback(session, len(batch), elapsed_ms, min(e.budget_ms for e in batch))
            for entry, value in zip(batch, outputs):
                for a, name in entry.subscribers:
                    if not a.finished and self.paths.advance(a, name, value, fail):
                        ready.append(a)
            self.lock.notify_all()
        return ready

    def host_ran(self, model: str, host_ms: float) -> None:
        self.observed.host_ran(model, host_ms)

    # -- requests out ----------------------------------------------------------------------------
    def release(self, done: list[Admitted]) -> None:
        """These requests are done with their servables (a retired version is freed after its last)."""
        with self.lock:
            for a in done:
                self.manager.release(a.servable)

    def claim(self, a: Admitted, reason: str) -> bool:
        """True when `a` may fail for `reason` (then it is done with its servable here)."""
        with self.lock:
            return self._claimed(a, reason)

    def claim_entries(self, dropped: Drops) -> list[tuple[Admitted, str]]:
        """The requests on these entries that may fail, each once (a request on two dropped
        entries fails once), under one hold of the lock: a plan under overload drops many."""
        if not dropped:
            return []
        claimed: dict[int, tuple[Admitted, str]] = {}
        with self.lock:
            for entry, reason in dropped:
                for a, _ in entry.subscribers:
                    if id(a) not in claimed and self._claimed(a, reason):
                        claimed[id(a)] = (a, reason)
        return list(claimed.values())

    def _claimed(self, a: Admitted, reason: str) -> bool:
        # not failed yet, nor finished (an error fails even a finished one)
        if a.future.done() or (a.finished and reason != "error"):
            return False
        self._finished(a)
        return True

    def _finished(self, a: Admitted) -> None:
        a.finished = True
        self.manager.release(a.servable)

    # -- reports and shutdown ----------------------------------------------------------------------
    def load_report(self, since_ms: float, lanes: int) -> dict:
        with self.lock:
            elapsed = max(1.0, self.clock() - since_ms)
            return {"busy_fraction": round(self.busy_ms / elapsed / lanes, 4), "guest": self.arbiter.report(),
                    "queues": {self.manager.sessions[s].label: n for s, n in self.queues.depths().items()
                               if s in self.manager.sessions}}

    def take_all(self, reason: str) -> Drops:
        with self.lock:
            return self.queues.take_all(reason)

    def close(self, drain: bool) -> Drops:
        """Take no more requests; wake every lane. What is queued is run (`drain`) or
        returned to be failed."""
        with self.lock:
            self.closing = self.arbiter.closing = True
            dropped = [] if drain else self.queues.take_all("shutdown")
            self.lock.notify_all()
        return dropped
