"""`vigil bench cluster --sim`: the placement planner (cluster/placement.py) at 16 to
1000 devices, in a discrete-event simulation with profiles.

A trace shaped like Nexus's game workload: many sessions of a few model kinds with
GPU-like linear profiles (a large fixed cost per batch), SLOs of 50 to 200 ms, and
rates drawn from a heavy tail, scaled so that the lower bound (sum of rate / T_max) is
the device count asked for. Three phases, each planned afresh as a Nexus epoch
would: steady; a rate step (a fifth of the sessions at twice their rate); and a
failure (a twentieth of the devices lost, their sessions placed again on the rest).

Each device runs the session table it was given: every duty cycle, each of its
sessions in turn takes up to its batch of the oldest requests waiting, drops those
that can no longer finish in time (early drop), and runs for l(n). A round that leaves
arrived requests waiting (a burst past a batch) is followed at once by the next, as
the backends' loop does (cluster/device.py); otherwise the device waits for the
cycle's end. Requests arrive
as the workloads' do, from video streams (`arrivals="streams"`, the default): a
session's rate is k streams of about `stream_fps` frames a second each, evenly spaced,
each from a random phase, and the routers' own deficit round robin
(cluster/routing.py) deals each session's requests to its devices by their planned
rates. `arrivals="poisson"` gives each device an independent Poisson process at its
planned rate instead, the harsher model: a whole device of a small batch then
overflows often (a batch of 5 due every cycle overflows in 30% of the cycles at 90% of
its rate), and what waits a second cycle misses an SLO of twice the batch's latency.
Reported per phase: devices used against the lower bound (`efficiency`), and SLO
attainment (requests within their SLO over all that arrived, drops counting as
misses).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from cluster.placement import Device, Placement, Workload, largest_batch, max_throughput_rps, place
from cluster.routing import DeficitRoundRobin
from engine.profiles import Profile

# model kind -> (alpha, beta) in ms: l(b) = alpha * b + beta on one GPU, up to batch 64
KINDS = {"resnet50": (1.1, 4.0), "inception": (1.4, 6.0), "vgg16": (2.5, 5.0), "ssd_mobilenet": (0.6, 3.0),
         "yolo": (3.0, 8.0), "googlenet": (0.8, 3.5)}
SLOS_MS = (50.0, 100.0, 200.0)
ARRIVALS = ("streams", "poisson")
MAX_BATCH = 64


def profile_of(kind: str) -> Profile:
    alpha, beta = KINDS[kind]
    return Profile.linear(alpha, beta, MAX_BATCH, kind, "sim-gpu")


@dataclass(frozen=True)
class SimOptions:
    devices: tuple[int, ...] = (16, 100, 1000)
    seconds: float = 4.0  # simulated time per phase
    seed: int = 0
    sessions_per_device: float = 1.5
    spare: float = 0.25  # devices available beyond the lower bound
    max_occupancy: tuple[float, ...] = (1.0, 0.9)  # planned busy share per device: Nexus's 1.0, and with headroom
    arrivals: str = "streams"  # or "poisson" (see the module's docstring)
    stream_fps: float = 30.0  # a stream's frame rate, for arrivals="streams" (game streams run at 30)

    def __post_init__(self) -> None:
        if not self.devices or min(self.devices) < 1 or max(self.devices) > 5000:
            raise ValueError(f"devices must be between 1 and 5000; were {self.devices}")
        if not (0 < self.seconds <= 600):
            raise ValueError(f"seconds must be in (0, 600]; was {self.seconds}")
        if not self.max_occupancy or not all(0 < u <= 1 for u in self.max_occupancy):
            raise ValueError(f"max_occupancy values must be in (0, 1]; were {self.max_occupancy}")
        if self.arrivals not in ARRIVALS:
            raise ValueError(f"arrivals must be one of {ARRIVALS}; was {self.arrivals!r}")
        if not (0 < self.stream_fps <= 1000):
            raise ValueError(f"stream_fps must be in (0, 1000]; was {self.stream_fps}")


def trace(num_devices: int, options: SimOptions, rng: np.random.Generator) -> list[Workload]:
    """Sessions whose lower bound is `num_devices`: heavy-tailed rates, mixed kinds and SLOs."""
    n = max(2, round(num_devices * options.sessions_per_device))
    kinds = rng.choice(sorted(KINDS), n)
    slos = rng.choice(SLOS_MS, n)
    weights = rng.pareto(1.2, n) + 0.05
    sessions = [Workload(f"s{i}", 1.0, float(slos[i]), profile_of(str(kinds[i]))) for i in range(n)]
    t_max = np.array([max_throughput_rps(w, {}) for w in sessions])
    # scale the rates so that sum(rate / T_max) is the device count
    scale = num_devices / float(np.sum(weights / t_max))
    return [Workload(w.session, float(weights[i] * scale), w.slo_ms, w.profile) for i, w in enumerate(sessions)
            if t_max[i] > 0]


def arrival_times(rate_rps: float, seconds: float, rng: np.random.Generator, arrivals: str = "streams",
                  stream_fps: float = 30.0) -> np.ndarray:
    """Sorted arrival times (ms) of `rate_rps` over `seconds`: k = round(rate / fps)
    evenly spaced streams from random phases, or a Poisson process."""
    horizon = seconds * 1000.0
    if arrivals == "poisson":
        return np.sort(rng.uniform(0.0, horizon, rng.poisson(rate_rps * seconds)))
    k = max(1, round(rate_rps / stream_fps))
    period = 1000.0 * k / rate_rps  # each stream's frame interval
    return np.sort(np.concatenate([np.arange(phase, horizon, period) for phase in rng.uniform(0.0, period, k)]))


def simulate(placement: Placement, workloads: list[Workload], seconds: float, rng: np.random.Generator,
             arrivals: str = "streams", stream_fps: float = 30.0) -> dict:
    """Run every device's session table over the arrivals; attainment over all
    requests that arrived, those no device took (unplaced) counting as misses."""
    by_session = {w.session: w for w in workloads}
    arrived = within = 0
    for session, rate in placement.unplaced:
        arrived += len(arrival_times(rate, seconds, rng, arrivals, stream_fps))
    dealt = _deal(placement, seconds, rng, arrivals, stream_fps)
    for d, plan in enumerate(placement.devices):
        queues = []
        for a in plan.assignments:
            w = by_session[a.session]
            times = dealt[d, a.session]
            # the backend batches up to the session's largest batch B, not only the planned
            # one: a cycle's slack absorbs a burst (Nexus's backends do the same)
            queues.append([w, max(a.batch, largest_batch(w, {})), times, 0])  # session, batch limit, arrivals (ms), next
            arrived += len(times)
        within += _run_device(queues, plan.duty_cycle_ms, seconds * 1000.0)
    return {"arrived": arrived, "within_slo": within, "attainment": round(within / arrived, 5) if arrived else None}


def _deal(placement: Placement, seconds: float, rng: np.random.Generator, arrivals: str,
          stream_fps: float) -> dict[tuple[int, str], np.ndarray]:
    """(device index, session) -> the arrivals that device gets of that session."""
    routes: dict[str, list[tuple[int, float]]] = {}  # session -> (device, planned rate)
    for d, plan in enumerate(placement.devices):
        for a in plan.assignments:
            routes.setdefault(a.session, []).append((d, a.rate_rps))
    dealt: dict[tuple[int, str], np.ndarray] = {}
    for session, devices in routes.items():
        if arrivals == "poisson":
            for d, rate in devices:
                dealt[d, session] = arrival_times(rate, seconds, rng, arrivals)
            continue
        times = arrival_times(sum(r for _, r in devices), seconds, rng, arrivals, stream_fps)
        if len(devices) == 1:
            dealt[devices[0][0], session] = times
            continue
        router = DeficitRoundRobin({str(d): r for d, r in devices})
        to = np.array([int(router.next()) for _ in range(len(times))])
        for d, _ in devices:
            dealt[d, session] = times[to == d]
    return dealt


def _run_device(queues: list, duty_ms: float, horizon_ms: float) -> int:
    """One device's duty cycles: returns the requests finished within their SLO. The
    next round starts at the cycle's end, or at once while a request that has arrived
    still waits: the backends' loop (cluster/device.py) never idles with work queued."""
    within, now = 0, 0.0
    while now < horizon_ms + max(q[0].slo_ms for q in queues):
        cycle_start = now
        for q in queues:
            w, batch, times, i = q
            end = int(np.searchsorted(times, now, side="right"))  # arrived by now
            # Nexus's early drop: slide the window of the batch along the queue, dropping
            # the oldest, until the window's first deadline leaves room for the whole batch
            while i < end and now + w.profile.latency_ms(min(batch, end - i)) > times[i] + w.slo_ms:
                i += 1
            n = min(batch, end - i)
            if n:
                now += w.profile.latency_ms(n)
                within += n
                i += n
            q[3] = i
        if not any(q[3] < len(q[2]) and q[2][q[3]] <= now for q in queues):
            now = max(now, cycle_start + duty_ms)
    return within


def run_phases(workloads: list[Workload], pool: list[Device], max_occupancy: float, seconds: float,
               rng: np.random.Generator, arrivals: str = "streams", stream_fps: float = 30.0) -> dict:
    """Steady, a rate step and a failure, each planned from the steady plan (as the
    scheduler plans from its last) and simulated."""
    steady = place(workloads, pool, max_occupancy=max_occupancy)
    stepped_ids = {w.session for w in workloads[: max(1, len(workloads) // 5)]}
    stepped = [Workload(w.session, w.rate_rps * (2 if w.session in stepped_ids else 1), w.slo_ms, w.profile)
               for w in workloads]
    lost = {d.device_id for d in steady.devices[: max(1, len(steady.devices) // 20)]}
    phases = {"steady": (steady, workloads),
              "rate_step": (place(stepped, pool, max_occupancy=max_occupancy, previous=steady), stepped),
              "failure": (place(workloads, [d for d in pool if d.device_id not in lost], max_occupancy=max_occupancy,
                                previous=steady),
                          workloads)}
    out = {}
    for name, (plan, load) in phases.items():
        sim = simulate(plan, load, seconds, rng, arrivals, stream_fps)
        out[name] = {"devices_used": plan.devices_used, "lower_bound": round(plan.lower_bound, 2),
                     "efficiency": round(plan.lower_bound / plan.devices_used, 4) if plan.devices_used else None,
                     "attainment": sim["attainment"], "unplaced_rps": round(sum(r for _, r in plan.unplaced), 2)}
    return out


def run_sim(options: SimOptions, log: Callable[[str], None] = print) -> dict:
    rng = np.random.default_rng(options.seed)
    rows = []
    for num in options.devices:
        workloads = trace(num, options, rng)
        pool = [Device(f"gpu{i}") for i in range(math.ceil(num * (1 + options.spare)) + 2)]
        for u in options.max_occupancy:
            row = {"devices": num, "sessions": len(workloads), "max_occupancy": u,
                   **run_phases(workloads, pool, u, options.seconds, rng, options.arrivals, options.stream_fps)}
            phases = ("steady", "rate_step", "failure")
            log(f"  {num} devices, {len(workloads)} sessions, occupancy <= {u}: " + "; ".join(
                f"{k} {row[k]['devices_used']} used / {row[k]['lower_bound']} bound (efficiency "
                f"{row[k]['efficiency']}), attainment {row[k]['attainment']}" for k in phases))
            rows.append(row)
    best = [r for r in rows if r["max_occupancy"] == options.max_occupancy[-1]]
    return {"sim": {"devices": [r["devices"] for r in best], "max_occupancy": options.max_occupancy[-1],
                    "efficiency": [r["steady"]["efficiency"] for r in best],
                    "attainment": [r["steady"]["attainment"] for r in best]},
            "rows": rows, "seconds": options.seconds, "seed": options.seed, "arrivals": options.arrivals}


def format_sim_report(result: dict) -> str:
    lines = ["| devices | sessions | occupancy <= | phase | used | lower bound | efficiency | attainment |",
             "|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        for phase in ("steady", "rate_step", "failure"):
            p = r[phase]
            lines.append(f"| {r['devices']} | {r['sessions']} | {r['max_occupancy']} | {phase} | {p['devices_used']} | "
                         f"{p['lower_bound']} | {p['efficiency']} | {p['attainment']} |")
    return "\n".join(lines)
