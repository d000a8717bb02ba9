"""Admission: a request becomes an `Admitted` one (its version chosen and resolved,
its path and stage deadlines set), or is refused at the door.

Refused: "unavailable" when no version can serve it, and "deadline" (the early drop)
when the queue ahead of its first stage cannot clear in time (engine/deadlines.py).
Called under the lock of the engine's core (engine/core.py), which alone calls it.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Callable

from engine.deadlines import ahead_of, hopeless, stage_deadlines
from engine.metrics import EngineMetrics
from engine.observed import ObservedProfiles
from engine.profiles import Profile
from engine.queues import Admitted, SessionQueues
from engine.requests import ADAPTIVE, Dropped, Request
from engine.scheduler import Policy
from engine.selection import AdaptiveSelector, VersionCost, capacity
from engine.servables import ModelManager


class Admission:
    def __init__(self, manager: ModelManager, queues: SessionQueues, observed: ObservedProfiles,
                 policy: Policy, metrics: EngineMetrics, share: bool, clock: Callable[[], float],
                 lanes: int = 1) -> None:
        self.manager, self.queues, self.observed = manager, queues, observed
        self.lanes = lanes  # batches the device runs at once: the queue ahead clears that much faster
        self.policy, self.metrics, self.share, self.clock = policy, metrics, share, clock
        self.selector = AdaptiveSelector(clock)
        self.top_priority = 0  # highest request priority seen (later stages of lower ones reserve time)

    def profile(self, session: str) -> Profile:
        return self.observed.current(session, self.manager.sessions[session].profile)

    def key(self, req: Request):
        """Equal keys share one entry; without prefix sharing nothing is shared."""
        return req.input_key if self.share else None

    def admit(self, req: Request, fut: Future, closing: bool = False) -> Admitted | None:
        """The request on its path, or None with `fut` failed ("unavailable")."""
        selected = None
        try:
            if closing:
                raise LookupError("engine is shutting down")
            ref, selected = self._select(req) if req.version == ADAPTIVE else (req.version, None)
            servable = self.manager.resolve(req.model, ref)
        except LookupError as exc:
            version = str(req.version) if req.version is not None else "latest"
            self.metrics.arrived(req.app, req.model, version)
            self.metrics.dropped(req.app, req.model, version, "unavailable")
            fut.set_exception(Dropped("unavailable", str(exc), selected))
            return None
        servable.in_flight += 1
        self.top_priority = max(self.top_priority, req.priority)
        self.metrics.arrived(req.app, req.model, str(servable.version))
        model = servable.model
        leaves = model.leaves_for_labels(list(req.labels) if req.labels is not None else None)
        stages = stage_deadlines(model, leaves, req, lambda h: self.manager.sessions[h].profile.latency_ms(1),
                                 self.observed.host_ms(req.model), self.top_priority)
        return Admitted(req, servable, fut, leaves, set(model.path_to(leaves)), stages, selected=selected)

    def hopeless(self, a: Admitted) -> bool:
        """The early drop. A request sharing an input already queued costs nothing and is
        never hopeless; the baselines without prefix sharing admit everything."""
        if not self.share and self.policy.name != "nexus":
            return False
        session = a.servable.model.fragments[a.root].hash
        if self.queues.queued(session, self.key(a.request)) is not None:
            return False
        queued = [(e.priority, e.flow) for e in self.queues.entries(session)]
        ahead = ahead_of(queued, a.request.app, a.request.priority, getattr(self.policy, "served", {}))
        return hopeless(ahead, self.profile(session), self.clock(), a.stage[a.root][0], self.lanes)

    def _select(self, req: Request) -> tuple[int, dict | None]:
        """Adaptive selection (engine/selection.py) over the loaded versions."""
        versions = self.manager.versions.get(req.model)
        if not versions:
            raise LookupError(f"model {req.model!r} is not loaded")
        host_ms = self.observed.host_ms(req.model)
        options = []
        for v, servable in versions.items():
            quality = servable.model.spec.quality
            profiles = [self.profile(f.hash) for f in servable.model.fragments.values()]
            options.append(VersionCost(v, quality if quality is not None else float(v),
                                       self.lanes * capacity(profiles, req.slo_ms, host_ms)))
        chosen, switch = self.selector.choose(req.app, req.model, options)
        if switch is not None:
            self.metrics.selection(req.app, req.model, chosen)
        return chosen, switch
