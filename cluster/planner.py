"""The global scheduler's state, without the cluster: backends, sessions, the plan and
the route tables. A scheduler actor wraps it; tests drive it with times and rates.

Backends register with their device (memory), sessions are added with an estimated
rate, and every beacon the backends report each session's observed rate. `tick`
plans the cluster again when an epoch is due (cluster/epochs.py) with the planner
(cluster/placement.py), planning each session at its observed arrival rate once a
beacon has reported one (its estimate before), and at no less than its `min_rate_rps`
(a session that must keep its device while idle); a lost backend is removed and
everything placed again at once. Each session's route table maps devices to the rates
the plan gave them: the routers' weights (cluster/routing.py). Every plan is kept in
`history` with why it was made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from cluster.epochs import EpochPolicy, Epochs
from cluster.placement import Device, DevicePlan, Placement, Prefix, Workload, place

MAX_HISTORY = 1000


@dataclass(frozen=True)
class PlanEvent:
    at_s: float
    reason: str
    devices_used: int
    lower_bound: float
    unplaced_rps: float


class GlobalScheduler:
    def __init__(self, policy: EpochPolicy = EpochPolicy(), max_occupancy: float = 1.0,
                 prefixes: Mapping[str, Prefix] | None = None, now_s: float = 0.0) -> None:
        self.epochs = Epochs(policy, now_s)
        self.max_occupancy = max_occupancy
        self.prefixes = dict(prefixes or {})
        self.backends: dict[str, Device] = {}
        self.sessions: dict[str, Workload] = {}
        self.observed_rps: dict[str, float] = {}
        self.placement = Placement((), (), 0.0)
        self.planned_rps: dict[str, float] = {}  # the rate each session was last planned at
        self.plans = 0  # made so far (history keeps only the latest)
        self.history: list[PlanEvent] = []

    # -- what backends and frontends tell it -------------------------------------------------------
    def register_backend(self, device: Device, now_s: float, sessions: Sequence[Workload] = (),
                         plan: bool = True) -> None:
        """A backend joins (or comes back) with the sessions it runs. Those this scheduler
        does not know (it was restarted, and the backends are how it learns its table
        again) are added; they and any load left unplaced are placed at once, unless
        `plan` is false (a restarted scheduler gathering its backends first)."""
        self.backends[device.device_id] = device
        unknown = [w for w in sessions if w.session not in self.sessions]
        for w in unknown:
            self.sessions[w.session] = w
        if plan and (unknown or self.placement.unplaced):
            self._plan(now_s, f"backend {device.device_id} joined" + (f" with {len(unknown)} sessions" if unknown else ""))

    def add_session(self, workload: Workload, now_s: float) -> None:
        """A new session with its estimated rate is placed at once (Nexus's LoadModel)."""
        if workload.prefix is not None and workload.prefix not in self.prefixes:
            raise ValueError(f"{workload.session}: prefix {workload.prefix!r} is not known to the scheduler")
        self.sessions[workload.session] = workload
        self._plan(now_s, f"session {workload.session} added")

    def remove_session(self, session: str, now_s: float) -> None:
        if self.sessions.pop(session, None) is not None:
            self.observed_rps.pop(session, None)
            self._plan(now_s, f"session {session} removed")

    def report(self, session: str, rate_rps: float) -> None:
        """A beacon's observed arrival rate of a session (summed over its devices)."""
        if session in self.sessions:
            self.observed_rps[session] = max(0.0, rate_rps)

    def remove_backend(self, device_id: str, now_s: float) -> None:
        """A backend was lost: its sessions are placed again now, on the others."""
        if self.backends.pop(device_id, None) is not None:
            self._plan(now_s, f"backend {device_id} lost")

    def tick(self, now_s: float) -> str | None:
        """A beacon: plan again when an epoch is due; returns why, or None."""
        # against the rate each session was planned at, not the part of it placed: a
        # session the devices could not wholly take would otherwise be planned again
        # every epoch to the same end
        planned = {s: self.planned_rps.get(s, 0.0) for s in self.sessions}
        observed = {s: self._rate(self.sessions[s]) for s in self.observed_rps}
        reason = self.epochs.due(now_s, observed, planned)
        if reason is not None:
            self._plan(now_s, reason)
        return reason

    def replan(self, now_s: float, reason: str) -> None:
        """Place everything again now."""
        self._plan(now_s, reason)

    # -- what it tells them -----------------------------------------------------------------------
    def routes(self, session: str) -> dict[str, float]:
        """Device -> the rate of `session` the plan gave it (the router's weights)."""
        return {d.device_id: a.rate_rps for d in self.placement.devices for a in d.assignments
                if a.session == session}

    def table(self, device_id: str) -> DevicePlan | None:
        """What a backend runs: its duty cycle and sessions with their batches."""
        return next((d for d in self.placement.devices if d.device_id == device_id), None)

    def _rate(self, w: Workload) -> float:
        """The rate a session is planned at: observed once reported, else estimated, and
        never under its minimum."""
        return max(w.min_rate_rps, self.observed_rps.get(w.session, w.rate_rps))

    def _plan(self, now_s: float, reason: str) -> None:
        workloads = [Workload(w.session, self._rate(w), w.slo_ms, w.profile, w.memory_mb, w.prefix, w.min_rate_rps)
                     for w in self.sessions.values()]
        self.planned_rps = {w.session: w.rate_rps for w in workloads}
        devices = [self.backends[d] for d in sorted(self.backends)]
        self.placement = place(workloads, devices, self.prefixes, self.max_occupancy, previous=self.placement)
        self.epochs.planned(now_s)
        self.plans += 1
        self.history.append(PlanEvent(now_s, reason, self.placement.devices_used, round(self.placement.lower_bound, 3),
                                      round(sum(r for _, r in self.placement.unplaced), 3)))
        del self.history[:-MAX_HISTORY]
