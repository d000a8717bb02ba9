"""A request's path through its model's fragments (prefix sharing lives here).

The root input is preprocessed once per distinct input, on the submitting thread and
outside the engine core's lock. Each fragment's input is queued in its session, or
subscribes to the entry of an equal input already queued (engine/queues.py), so a
backbone shared by several apps and models runs once per frame. A fragment's output
then goes on to the next fragments on the request's path, or is kept as a head's
result; the request is done when every head it asked for has one.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from engine.admission import Admission
from engine.observed import ObservedProfiles
from engine.queues import Admitted, QueueEntry, QueueFull, SessionQueues
from engine.requests import Dropped
from engine.servables import ModelManager

Fail = Callable[[Admitted, str, str], None]  # (request, reason, detail)


class Paths:
    """Called by the engine's core (engine/core.py), under its lock except `preprocess`."""

    def __init__(self, manager: ModelManager, queues: SessionQueues, admission: Admission,
                 observed: ObservedProfiles, clock: Callable[[], float]) -> None:
        self.manager, self.queues, self.admission = manager, queues, admission
        self.observed, self.clock = observed, clock

    def preprocess(self, todo: list[tuple[int, Admitted]], admitted: list[Admitted | None],
                   fail: Fail) -> dict[int, Any]:
        """Outside the lock: the root inputs of `todo` (index, request: one per distinct
        input not queued already), preprocessed (index -> input). An image the model
        cannot take fails its own request ("invalid", and its slot in `admitted` becomes
        None), never the others."""
        inputs: dict[int, Any] = {}
        for i, a in todo:
            t0 = time.perf_counter()
            try:
                inputs[i] = a.servable.model.preprocess(a.request.image[None])[0]
            except Exception as exc:
                fail(a, "invalid", f"preprocess: {type(exc).__name__}: {exc}")
                admitted[i] = None
                continue
            self.observed.host_ran(a.request.model, (time.perf_counter() - t0) * 1000.0)
        return inputs

    def queued(self, a: Admitted, fragment: str) -> QueueEntry | None:
        """Under the lock: the entry of this request's input to `fragment`, if one is queued."""
        return self.queues.queued(a.servable.model.fragments[fragment].hash, self.admission.key(a.request))

    def enqueue(self, a: Admitted, fragment: str, value: Any) -> None:
        """Under the lock: subscribe to the entry of this input, or queue a new one
        (Dropped "overloaded" when the session's queue is full)."""
        entry = self.queued(a, fragment)
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

    def advance(self, a: Admitted, fragment: str, value: Any, fail: Fail) -> bool:
        """Under the lock: a fragment's output reaches its request, as a result or as the
        input of the next fragments on its path. True when all its heads are done."""
        model = a.servable.model
        if fragment in a.leaves:
            a.outputs[fragment] = value
        for child, frag in model.fragments.items():
            if frag.parent == fragment and child in a.needed:
                try:
                    self.enqueue(a, child, value)
                except Dropped as exc:
                    fail(a, exc.reason, str(exc))
        if not a.finished and len(a.outputs) == len(a.leaves):
            a.finished = True
            return True
        return False
