"""Placing sessions on devices: Nexus's squishy bin packing, a pure function.

A session (a model's fragments at one SLO) arrives at `rate_rps` and runs on a device
kind whose batch-latency profile l(b) is known. Its largest batch B is the largest
whose latency fits twice into the SLO (a request may wait one batch, then run in the
next), and at B one device serves T_max = B / l(B). So:

1. Saturate: a session gets floor(rate / T_max) whole devices, each running batch B
   back to back.
2. The residual rate r gets a node of its own first: a duty cycle d (the device runs
   the session once every d) and a batch ceil(r * d). The longest usable d is the
   largest of min(SLO - l(b), b / r) over b <= B: b requests arrive within d, and the
   last of them waits at most d before its batch runs for l(b).
3. Residual nodes are merged onto devices, the shortest duty cycle first (largest
   occupancy l(b)/d first among equal cycles). Merging takes the shorter duty cycle,
   d = min(d1, d2); every session on the device then runs batch ceil(r * d), and the
   device fits while the batches' latencies sum to at most d and the models fit in its
   memory. Nexus merges the largest occupancy first; then a short-cycle residual that
   comes later shortens a device's long cycle, and every session already there runs
   smaller batches. Shortest first, a device's cycle is set by its first node and the
   later ones, with longer cycles, give up the least: on the simulator's traces it
   comes nearer the lower bound's efficiency than Nexus's order, and on random sets of
   sessions it needs fewer devices far more often than more. Each node goes where it
   adds the least busy time (prefix sharing makes that a device that already runs its
   prefix), the fullest such device on ties; a new device is opened when none fits. Where a shared
   prefix's batch would make the shorter cycle too slow for an SLO, the merge takes the
   longest cycle that keeps every session in time, if the device still fits.

Given the `previous` placement, a plan changes as little as it can: a session's whole
devices and residual node go back to the devices that ran it before when those are
free, and a residual merges onto a device that ran it before when that fits, before
any other. A backend then keeps the sessions it has loaded and the routers' tables
stay as they were, so an epoch that only adjusts rates moves nothing.

Sessions that share a prefix (a backbone several apps' models contain) declare it:
their own profile is then their suffix, and a device runs the prefix once per cycle
for all of them at their summed rate, which is what makes placing them together win.

The planner touches no device and reads no clock: sessions and devices in, a
`Placement` out (per device: duty cycle, and per session its rate and batch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from engine.profiles import Profile


@dataclass(frozen=True)
class Prefix:
    """A fragment several sessions share, run once per cycle for all of them."""

    profile: Profile
    memory_mb: float = 0.0


@dataclass(frozen=True)
class Workload:
    """One session's demand: its rate, SLO, profile on the device kind, and memory."""

    session: str
    rate_rps: float
    slo_ms: float
    profile: Profile  # its own fragments (the suffix, when `prefix` is set)
    memory_mb: float = 0.0
    prefix: str | None = None  # the shared prefix's name (a key of the prefixes given to `place`)
    # the global scheduler plans it at no less, whatever rate is observed: a session that
    # must keep a device while it is idle (a camera app's model between bursts)
    min_rate_rps: float = 0.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rate_rps) and self.rate_rps >= 0):
            raise ValueError(f"{self.session}: rate_rps must be finite and >= 0; was {self.rate_rps}")
        if not (math.isfinite(self.min_rate_rps) and self.min_rate_rps >= 0):
            raise ValueError(f"{self.session}: min_rate_rps must be finite and >= 0; was {self.min_rate_rps}")
        if not (math.isfinite(self.slo_ms) and self.slo_ms > 0):
            raise ValueError(f"{self.session}: slo_ms must be finite and > 0; was {self.slo_ms}")
        if not (math.isfinite(self.memory_mb) and self.memory_mb >= 0):
            raise ValueError(f"{self.session}: memory_mb must be finite and >= 0; was {self.memory_mb}")


@dataclass(frozen=True)
class Device:
    device_id: str
    memory_mb: float = math.inf


@dataclass(frozen=True)
class Assignment:
    session: str
    rate_rps: float
    batch: int


@dataclass(frozen=True)
class DevicePlan:
    device_id: str
    duty_cycle_ms: float  # the device runs each of its sessions once per cycle
    exec_ms: float  # the cycle's busy time: every batch (and each shared prefix once)
    assignments: tuple[Assignment, ...]
    memory_mb: float

    @property
    def occupancy(self) -> float:
        return self.exec_ms / self.duty_cycle_ms if self.duty_cycle_ms > 0 else 0.0


@dataclass(frozen=True)
class Placement:
    devices: tuple[DevicePlan, ...]
    unplaced: tuple[tuple[str, float], ...]  # (session, rate) that no device could take
    lower_bound: float  # sum of rate / T_max: the devices a perfect packing would need

    @property
    def devices_used(self) -> int:
        return len(self.devices)

    def rate_of(self, session: str) -> float:
        return sum(a.rate_rps for d in self.devices for a in d.assignments if a.session == session)


class _Node:
    """A device being filled: its sessions (with their rates) and duty cycle."""

    def __init__(self, duty_ms: float) -> None:
        self.duty_ms = duty_ms
        self.rates: dict[str, float] = {}

    def cycle(self, workloads: Mapping[str, Workload], prefixes: Mapping[str, Prefix], duty_ms: float,
              extra: tuple[str, float] | None = None) -> tuple[float, bool]:
        """(busy time per cycle, whether every session meets its SLO) at `duty_ms`, with
        `extra` added. A session's request waits at most a cycle, then its prefix's batch
        (at the prefix's summed rate) and its own run."""
        rates = dict(self.rates)
        if extra is not None:
            rates[extra[0]] = rates.get(extra[0], 0.0) + extra[1]
        shared: dict[str, float] = {}
        for session, rate in rates.items():
            name = workloads[session].prefix
            if name is not None:
                shared[name] = shared.get(name, 0.0) + rate
        prefix_ms = {n: prefixes[n].profile.latency_ms(_batch(r, duty_ms)) for n, r in shared.items()}
        total, in_time = sum(prefix_ms.values()), True
        for session, rate in rates.items():
            w = workloads[session]
            own = w.profile.latency_ms(_batch(rate, duty_ms))
            total += own
            in_time &= duty_ms + own + prefix_ms.get(w.prefix, 0.0) <= w.slo_ms * (1 + 1e-9)
        return total, in_time

    def memory_mb(self, workloads: Mapping[str, Workload], prefixes: Mapping[str, Prefix],
                  extra: str | None = None) -> float:
        sessions = set(self.rates) | ({extra} if extra else set())
        names = {workloads[s].prefix for s in sessions} - {None}
        return sum(workloads[s].memory_mb for s in sessions) + sum(prefixes[n].memory_mb for n in names)


def _batch(rate_rps: float, duty_ms: float) -> int:
    return max(1, math.ceil(rate_rps * duty_ms / 1000.0 - 1e-9))


def full_latency_ms(w: Workload, prefixes: Mapping[str, Prefix], batch: int) -> float:
    """The session's whole path at this batch: its prefix and its own fragments."""
    own = w.profile.latency_ms(batch)
    return own + (prefixes[w.prefix].profile.latency_ms(batch) if w.prefix is not None else 0.0)


def largest_batch(w: Workload, prefixes: Mapping[str, Prefix]) -> int:
    """B: the largest allowed batch whose latency fits twice into the SLO (0: none), up
    to the efficient batch of the session's fragments (past it, fewer items a second)."""
    limit = w.profile.efficient_batch
    if w.prefix is not None:
        limit = min(limit, prefixes[w.prefix].profile.efficient_batch)
    best = 0
    for b in range(1, limit + 1):
        if 2.0 * full_latency_ms(w, prefixes, b) <= w.slo_ms:
            best = b
    return best


def max_throughput_rps(w: Workload, prefixes: Mapping[str, Prefix]) -> float:
    """T_max: what one device serves of this session alone, at batch B (0: it cannot)."""
    b = largest_batch(w, prefixes)
    return b * 1000.0 / full_latency_ms(w, prefixes, b) if b else 0.0


def longest_duty_ms(w: Workload, prefixes: Mapping[str, Prefix], rate_rps: float) -> float:
    """The longest duty cycle that serves `rate_rps` of this session within its SLO: the
    largest min(SLO - l(b), b / r) over b <= B."""
    best = 0.0
    for b in range(1, largest_batch(w, prefixes) + 1):
        d = min(w.slo_ms - full_latency_ms(w, prefixes, b), b * 1000.0 / rate_rps)
        best = max(best, d)
    return best


def place(workloads: Sequence[Workload], devices: Sequence[Device],
          prefixes: Mapping[str, Prefix] | None = None, max_occupancy: float = 1.0,
          previous: Placement | None = None) -> Placement:
    """Squishy bin packing of `workloads` onto `devices` (all of one kind, the kind the
    profiles were measured on). What does not fit is listed in `unplaced`.

    `max_occupancy` is the busy share a device is planned to at most: 1.0 is Nexus's
    packing; below it each device keeps headroom for the bursts of random arrivals (a
    device planned to exactly its capacity drops a share of any Poisson load)."""
    if not (0.0 < max_occupancy <= 1.0):
        raise ValueError(f"max_occupancy must be in (0, 1]; was {max_occupancy}")
    prefixes = dict(prefixes or {})
    by_session = {w.session: w for w in workloads}
    if len(by_session) != len(workloads):
        raise ValueError("session names must be unique")
    missing = sorted({w.prefix for w in workloads if w.prefix is not None} - set(prefixes))
    if missing:
        raise ValueError(f"prefixes named by sessions but not given: {missing}")
    free = list(devices)
    hosts_before = _hosts(previous)
    plans: list[DevicePlan] = []
    unplaced: list[tuple[str, float]] = []
    residual: list[tuple[float, str, float, float]] = []  # (occupancy, session, rate, duty)
    lower_bound = 0.0
    for w in sorted(workloads, key=lambda w: w.session):
        if w.rate_rps <= 0:
            continue
        t_max = max_throughput_rps(w, prefixes)
        if t_max <= 0:  # even a batch of one misses its SLO here
            unplaced.append((w.session, w.rate_rps))
            continue
        lower_bound += w.rate_rps / t_max
        b = largest_batch(w, prefixes)
        per_device = max_occupancy * t_max  # a whole device runs batches of up to B, busy this share
        whole, rest = divmod(w.rate_rps, per_device)
        for _ in range(int(whole)):
            if not free:
                unplaced.append((w.session, per_device))
                continue
            run_ms = full_latency_ms(w, prefixes, b)
            memory = w.memory_mb + (prefixes[w.prefix].memory_mb if w.prefix else 0.0)
            device = _take(free, hosts_before.get(w.session, ()), hosts_before)
            if memory > device.memory_mb:
                unplaced.append((w.session, per_device))
                free.insert(0, device)
                continue
            batch = _batch(per_device, run_ms)
            plans.append(DevicePlan(device.device_id, run_ms, full_latency_ms(w, prefixes, batch),
                                    (Assignment(w.session, per_device, batch),), memory))
        if rest > 1e-9:
            duty = longest_duty_ms(w, prefixes, rest)
            occupancy = full_latency_ms(w, prefixes, _batch(rest, duty)) / duty
            residual.append((occupancy, w.session, rest, duty))
    nodes: list[tuple[Device, _Node]] = []
    for _, session, rate, duty in sorted(residual, key=lambda r: (r[3], -r[0], r[1])):
        choice = _best_fit(nodes, session, rate, duty, by_session, prefixes, max_occupancy,
                           set(hosts_before.get(session, ())))
        if choice is not None:
            node = nodes[choice[0]][1]
            node.duty_ms = choice[1]
            node.rates[session] = node.rates.get(session, 0.0) + rate
            continue
        if not free:
            unplaced.append((session, rate))
            continue
        node = _Node(duty)
        device = _take(free, hosts_before.get(session, ()), hosts_before)
        if node.memory_mb(by_session, prefixes, session) > device.memory_mb:
            unplaced.append((session, rate))
            free.insert(0, device)
            continue
        node.rates[session] = rate
        nodes.append((device, node))
    for device, node in nodes:
        assignments = tuple(Assignment(s, r, _batch(r, node.duty_ms)) for s, r in sorted(node.rates.items()))
        plans.append(DevicePlan(device.device_id, node.duty_ms, node.cycle(by_session, prefixes, node.duty_ms)[0],
                                assignments, node.memory_mb(by_session, prefixes)))
    return Placement(tuple(plans), tuple(unplaced), lower_bound)


def _hosts(placement: Placement | None) -> dict[str, list[str]]:
    """Session -> the devices that ran it, in the placement's order."""
    hosts: dict[str, list[str]] = {}
    for plan in placement.devices if placement else ():
        for a in plan.assignments:
            hosts.setdefault(a.session, []).append(plan.device_id)
    return hosts


def _take(free: list[Device], preferred: Sequence[str], claimed: Mapping[str, list[str]]) -> Device:
    """The first free device among `preferred` (ids), else the first free one that ran
    nothing before (so as not to take another session's place), else the first free
    one; removed from `free`."""
    for device_id in preferred:
        for i, device in enumerate(free):
            if device.device_id == device_id:
                return free.pop(i)
    used = {d for ids in claimed.values() for d in ids}
    for i, device in enumerate(free):
        if device.device_id not in used:
            return free.pop(i)
    return free.pop(0)


def _best_fit(nodes: list[tuple[Device, _Node]], session: str, rate: float, duty: float,
              workloads: Mapping[str, Workload], prefixes: Mapping[str, Prefix],
              max_occupancy: float, ran_here: set[str] = frozenset()) -> tuple[int, float] | None:
    """(node, its new duty cycle) on a device in `ran_here` when one fits, else where
    this residual adds the least busy share (the fullest on ties), or None when it fits
    on none."""
    best, best_key = None, None
    for i, (device, node) in enumerate(nodes):
        if node.memory_mb(workloads, prefixes, session) > device.memory_mb:
            continue
        d = _common_duty(node, min(node.duty_ms, duty), (session, rate), workloads, prefixes, max_occupancy)
        if d is None:
            continue
        after = node.cycle(workloads, prefixes, d, (session, rate))[0]
        before = node.cycle(workloads, prefixes, node.duty_ms)[0] / node.duty_ms
        key = (device.device_id not in ran_here, after / d - before, -after / d)
        if best_key is None or key < best_key:
            best, best_key = (i, d), key
    return best


def _common_duty(node: _Node, longest_ms: float, extra: tuple[str, float], workloads: Mapping[str, Workload],
                 prefixes: Mapping[str, Prefix], max_occupancy: float) -> float | None:
    """The longest duty cycle up to `longest_ms` at which the node with `extra` keeps
    every session in its SLO and is busy at most `max_occupancy` of the cycle, or None. Nexus takes the
    shorter of the two cycles; a shared prefix runs a batch of everyone's requests, so
    a shorter cycle may be needed to keep its sessions in time. Latency grows with the
    cycle and the busy share falls, so the longest cycle in time is the one to check."""
    busy, in_time = node.cycle(workloads, prefixes, longest_ms, extra)
    d = longest_ms
    if not in_time:
        lo, hi = 0.0, longest_ms
        for _ in range(40):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if node.cycle(workloads, prefixes, mid, extra)[1] else (lo, mid)
        if lo <= 0.0:
            return None
        d = lo
        busy, in_time = node.cycle(workloads, prefixes, d, extra)
    return d if in_time and busy <= max_occupancy * d + 1e-9 else None


def check(placement: Placement, workloads: Sequence[Workload], devices: Sequence[Device],
          prefixes: Mapping[str, Prefix] | None = None) -> list[str]:
    """What a placement must hold, as problems (none: it holds): every device busy at
    most its duty cycle and within its memory, every request within its SLO after
    waiting one cycle, every assignment's batch enough for its rate, and each session's
    rate covered (placed, or listed unplaced)."""
    prefixes = dict(prefixes or {})
    by_session = {w.session: w for w in workloads}
    memory = {d.device_id: d.memory_mb for d in devices}
    problems = []
    if len({p.device_id for p in placement.devices}) != len(placement.devices):
        problems.append("a device is planned twice")
    for plan in placement.devices:
        node = _Node(plan.duty_cycle_ms)
        node.rates = {a.session: a.rate_rps for a in plan.assignments}
        busy, in_time = node.cycle(by_session, prefixes, plan.duty_cycle_ms)
        if busy > plan.duty_cycle_ms * (1 + 1e-6):
            problems.append(f"{plan.device_id}: busy {busy:.3f} ms of a {plan.duty_cycle_ms:.3f} ms cycle")
        if not in_time:
            problems.append(f"{plan.device_id}: a request can miss its SLO")
        if node.memory_mb(by_session, prefixes) > memory[plan.device_id]:
            problems.append(f"{plan.device_id}: {plan.memory_mb} MB of {memory[plan.device_id]} MB")
        for a in plan.assignments:
            if a.rate_rps > a.batch * 1000.0 / plan.duty_cycle_ms * (1 + 1e-6):
                problems.append(f"{plan.device_id}: {a.session} gets {a.rate_rps} rps from batch {a.batch} "
                                f"every {plan.duty_cycle_ms} ms")
    for w in workloads:
        covered = placement.rate_of(w.session) + sum(r for s, r in placement.unplaced if s == w.session)
        if abs(covered - w.rate_rps) > 1e-6 * max(1.0, w.rate_rps):
            problems.append(f"{w.session}: {covered} of {w.rate_rps} rps placed or listed unplaced")
    return problems
