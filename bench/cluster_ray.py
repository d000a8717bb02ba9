"""`vigil bench cluster`: Vigil's scheduler, backends and routers on a real Ray cluster
of several nodes on this machine.

A `ray.cluster_utils.Cluster` on loopback: a head and `nodes` worker nodes, each with
`gpus_per_node` logical GPUs and Ray's health checks tuned to notice a lost node in
about two seconds. On it: the global scheduler (a detached actor), one backend per
logical GPU (a detached actor pinned to its node, executing with the sleep executor:
l(b) from the session's profile, so that two cores can host a cluster of many), and in
this process a router that sends Poisson arrivals of every session, in ticks.

The workload is the simulation's (bench/cluster_sim.py): sessions of GPU-like model
kinds, rates drawn heavy-tailed and scaled to a lower bound of `load_devices`. Its
profiles and SLOs are stretched by `time_scale` (and so its rates shrink by as much):
at a GPU's own pace, six devices' worth of load is thousands of requests a second,
more than one router and a Ray cluster on two cores can carry. Each request also
crosses Ray twice, so the planner is given each SLO less `OVERHEAD_MS`. Three phases, back to back:

- steady: devices used against the lower bound, and attainment (requests within their
  SLO over all sent; drops, late results and lost requests count as misses);
- a 2x rate step on half the sessions: attainment over the phase, and the time from
  the step until every one-second window is at 0.99 again (`reconverge_s`). The phase
  ends an SLO before the kill: requests sent later meet the kill in flight and count
  in the failover;
- failover: the node with the most backends is killed; the time until every window
  is at 0.99 again (`failover_s`), the requests failed fast as `backend_lost`, and
  `lost_events`: requests that never got any outcome (that hung).

Then the peer, unless `serve_peer` is off: the same workload on Ray Serve's autoscaled
deployments on a fresh cluster (bench/cluster_serve_peer.py), and the devices Vigil
used over the replicas Serve held. Then, unless `engine_s` is 0, the real SceneDet on
a backend that runs Vigil's engine (bench/cluster_engine.py).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from bench.cluster_sim import SimOptions, run_sim, trace
from bench.traffic import TARGET, Traffic
from cluster.epochs import EpochPolicy
from cluster.placement import Workload, max_throughput_rps

OVERHEAD_MS = 40.0  # of each SLO, kept for Ray's two crossings and the router's tick


@dataclass(frozen=True)
class ClusterBenchOptions:
    nodes: int = 4
    gpus_per_node: int = 4
    load_devices: float = 6.0  # the workload's lower bound, in devices
    sessions_per_device: float = 1.0
    time_scale: float = 10.0  # the simulation's profiles and SLOs (50-200 ms) times this
    steady_s: float = 12.0
    step_s: float = 15.0
    failover_s: float = 12.0
    beacon_s: float = 0.5
    seed: int = 0
    # the planned busy share per device, each on a fresh cluster; the first is the
    # headline. Nexus plans devices full (1.0). The bench's arrivals are Poisson: a
    # device planned to its whole T_max runs at a load of 1, where a queue has no
    # bound, and a large session planned at a rate read low by chance sends each of its
    # devices more than T_max (the routers split by planned rates)
    max_occupancy: tuple[float, ...] = (0.9, 1.0)
    sim_devices: tuple[int, ...] = (16, 100, 1000)
    serve_peer: bool = True  # the same workload on Ray Serve's autoscaled deployments, on a fresh cluster
    serve_settle_s: float = 20.0  # for its replicas to scale before its window (steady_s) measures
    # Serve sends each request on its own: on two cores it carried about 25 a second
    # (at 40 its attainment fell to 0.37), so its workload is stretched further; the
    # devices a workload needs do not change with the stretch
    serve_time_scale: float = 200.0
    engine_s: float = 15.0  # then the real SceneDet on a backend running Vigil's engine, this long (0: skip)
    engine_rate_rps: float = 20.0
    # then `vigil serve --cluster` beside `vigil serve` with this many cameras (0: skip)
    front_cameras: int = 8
    front_window_s: float = 30.0
    front_warmup_s: float = 25.0  # before each front-door window, as the serve bench warms up
    front_repeats: int = 2

    def __post_init__(self) -> None:
        if not (2 <= self.nodes <= 16 and 1 <= self.gpus_per_node <= 16):
            raise ValueError("nodes must be 2 to 16 and gpus_per_node 1 to 16")
        if not (0 < self.load_devices <= self.nodes * self.gpus_per_node):
            raise ValueError(f"load_devices must be in (0, {self.nodes * self.gpus_per_node}]")
        if not self.max_occupancy or not all(0.5 <= u <= 1.0 for u in self.max_occupancy):
            raise ValueError(f"max_occupancy must be one or more shares in [0.5, 1]; was {self.max_occupancy}")
        for name in ("steady_s", "step_s", "failover_s", "serve_settle_s"):
            if not (1.0 <= getattr(self, name) <= 600):
                raise ValueError(f"{name} must be in [1, 600]")
        if not (1.0 <= self.time_scale <= 1000 and 1.0 <= self.serve_time_scale <= 1000):
            raise ValueError("time_scale and serve_time_scale must be in [1, 1000]")
        if not (self.engine_s == 0 or 1.0 <= self.engine_s <= 600) or not (0 < self.engine_rate_rps <= 1000):
            raise ValueError("engine_s must be 0 or in [1, 600], and engine_rate_rps in (0, 1000]")
        if not (0 <= self.front_cameras <= 64 and 1.0 <= self.front_window_s <= 600
                and 0 <= self.front_warmup_s <= 600 and 1 <= self.front_repeats <= 10):
            raise ValueError("front_cameras must be in [0, 64], front_window_s in [1, 600], front_warmup_s in "
                             "[0, 600] and front_repeats in [1, 10]")


def _workload(options: ClusterBenchOptions) -> tuple[list[Workload], dict[str, float]]:
    """The simulation's trace, SLOs lengthened; planned with the overhead taken off."""
    sim = SimOptions(sessions_per_device=options.sessions_per_device, seed=options.seed)
    base = trace(max(1, round(options.load_devices)), sim, np.random.default_rng(options.seed))
    slo = {w.session: w.slo_ms * options.time_scale for w in base}
    # rates for the planner's view of the SLO, scaled back to the lower bound asked for
    planned = [Workload(w.session, w.rate_rps, slo[w.session] - OVERHEAD_MS, w.profile.scaled(options.time_scale))
               for w in base]
    bound = sum(w.rate_rps / max_throughput_rps(w, {}) for w in planned)
    scale = options.load_devices / bound
    return [Workload(w.session, w.rate_rps * scale, w.slo_ms, w.profile) for w in planned], slo


def run_cluster_bench(options: ClusterBenchOptions, log: Callable[[str], None] = print) -> dict:
    from cluster.local import local_cluster

    runs = []
    for occupancy in options.max_occupancy:  # a fresh cluster each: the failover phase kills a node
        log(f"starting a Ray cluster: a head and {options.nodes} nodes of {options.gpus_per_node} logical GPUs; "
            f"devices planned to {occupancy:.0%} busy")
        started = time.monotonic()
        with local_cluster(options.nodes, options.gpus_per_node) as (cluster, nodes):
            runs.append(_phases(options, occupancy, cluster, nodes, started, log))
    result = {**runs[0], "by_occupancy": runs}
    if options.serve_peer:
        from bench.cluster_serve_peer import serve_peer

        workloads, slo = _workload(replace(options, time_scale=options.serve_time_scale))
        result.update(serve_peer(options.nodes, options.gpus_per_node, workloads, slo, options.serve_settle_s,
                                 options.steady_s, options.seed, log))
        used = result["ray_serve_devices_used"]
        result["vigil_vs_ray_serve_devices"] = round(result["devices_used"] / used, 3) if used else None
    if options.engine_s:
        from bench.cluster_engine import engine_phase

        result["engine"] = engine_phase(options.engine_s, options.engine_rate_rps, options.seed, log)
    if options.front_cameras:
        from bench.cluster_front import front_phase

        result["front"] = front_phase(options.front_cameras, options.front_window_s, options.front_warmup_s,
                                      options.front_repeats, log)
    log("simulation")
    result["sim"] = run_sim(SimOptions(devices=options.sim_devices, seconds=2.0), log)["sim"]
    return result


def _phases(options: ClusterBenchOptions, occupancy: float, cluster, nodes: list, started: float,
            log: Callable[[str], None]) -> dict:
    import ray

    from cluster.backend import BackendConfig, start_backend
    from cluster.router import Router
    from cluster.scheduler import scheduler_handle

    router = traffic = None
    try:
        policy = EpochPolicy(beacon_s=options.beacon_s, epoch_s=30.0, min_epoch_s=3.0)
        scheduler = scheduler_handle(policy, max_occupancy=occupancy)
        node_ids = [n.node_id for n in nodes]
        backends_of: dict[str, list[str]] = {}
        for i, node_id in enumerate(node_ids):
            for g in range(options.gpus_per_node):
                device = f"n{i}g{g}"
                start_backend(BackendConfig(device, beacon_s=options.beacon_s), node_id)
                backends_of.setdefault(node_id, []).append(device)
        workloads, slo = _workload(options)
        for w in workloads:
            ray.get(scheduler.add_session.remote(w))
        _wait_for(lambda: len(ray.get(scheduler.plan.remote())["backends"]) == len(node_ids) * options.gpus_per_node,
                  30.0, "every backend to register")
        log(f"  cluster up in {time.monotonic() - started:.1f} s; {len(workloads)} sessions, "
            f"{sum(w.rate_rps for w in workloads):.0f} requests/s")
        router = Router(scheduler, "bench", refresh_s=0.1, report_s=options.beacon_s, rate_window_s=2.0)
        traffic = Traffic(router, workloads, slo, options.seed)

        # steady, then a 2x rate step on half the sessions, then a node killed; every
        # phase is measured at the end, when every request sent has had its SLO to end
        time.sleep(options.steady_s)
        t_step = traffic.now()
        steady_plan = ray.get(scheduler.plan.remote())
        for w in workloads[::2]:
            traffic.set_rate(w.session, 2 * w.rate_rps)
        time.sleep(options.step_s)
        t_fail = traffic.now()
        plan = ray.get(scheduler.plan.remote())
        busy = Counter()  # the node with the most sessions placed on it
        for d in plan["devices"]:
            busy[next(n for n, devs in backends_of.items() if d["device"] in devs)] += len(d["sessions"])
        victim = busy.most_common(1)[0][0] if busy else node_ids[0]
        cluster.remove_node(next(n for n in nodes if n.node_id == victim), allow_graceful=False)
        time.sleep(options.failover_s)
        t_end = traffic.now()
        traffic.stop()
        time.sleep(max(slo.values()) / 1000.0 + 1.0)

        warm = min(3.0, options.steady_s / 3)
        steady, steady_counts = traffic.attainment(warm, t_step)
        log(f"  steady: {steady_plan['devices_used']} devices used, lower bound {steady_plan['lower_bound']}, "
            f"attainment {steady} ({dict(steady_counts)})")
        # requests sent within an SLO of the kill meet it in flight: they count in failover
        t_step_end = t_fail - max(slo.values()) / 1000.0
        step, step_counts = traffic.attainment(t_step, t_step_end)
        reconverge = traffic.settled_after(t_step, t_step_end)
        by_session = {w.session: traffic.attainment(t_step, t_step_end, w.session)[0] for w in workloads}
        step_windows = traffic.by_window(t_step, t_step_end)
        log(f"  2x step on {len(workloads[::2])} sessions: attainment {step}, re-converged after {reconverge} s "
            f"({dict(step_counts)}); by session: {by_session}; by second: {step_windows}")
        failover, fail_counts = traffic.attainment(t_step_end, t_end)
        failover_s = traffic.settled_after(t_fail, t_end)
        _, all_counts = traffic.attainment(0.0, t_end)
        failover_windows = traffic.by_window(t_fail, t_end)
        log(f"  node with {len(backends_of[victim])} backends killed: attainment {failover}, back at {TARGET} after "
            f"{failover_s} s ({dict(fail_counts)}); by second: {failover_windows}")
        final_plan = ray.get(scheduler.plan.remote())
    finally:
        if traffic is not None:
            traffic.stop()
        if router is not None:
            router.close()
    used = steady_plan["devices_used"]
    return {"nodes": options.nodes, "gpus_per_node": options.gpus_per_node, "sessions": len(workloads),
            "max_occupancy": occupancy, "devices_used": used, "devices_lower_bound": steady_plan["lower_bound"],
            "efficiency": round(steady_plan["lower_bound"] / used, 4) if used else None,
            "attainment": steady, "step_attainment": step, "reconverge_s": reconverge, "step_windows": step_windows,
            "failover_attainment": failover, "failover_s": failover_s, "failover_windows": failover_windows,
            "backend_lost": all_counts.get("backend_lost", 0), "lost_events": all_counts.get("no_outcome", 0),
            "outcomes": dict(all_counts), "plans": [e["reason"] for e in final_plan["history"]], "lost_backends": final_plan["lost"]}


def _wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.2)


def format_cluster_report(result: dict) -> str:
    keys = ("max_occupancy", "devices_used", "devices_lower_bound", "efficiency", "attainment", "step_attainment",
            "reconverge_s", "failover_attainment", "failover_s", "backend_lost", "lost_events")
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    runs = result.get("by_occupancy", [result])
    lines += ["| " + " | ".join(str(run.get(k)) for k in keys) + " |" for run in runs]
    peer = ("ray_serve_devices_used", "ray_serve_attainment", "vigil_vs_ray_serve_devices")
    if result.get(peer[0]) is not None:
        lines += ["", "| " + " | ".join(peer) + " |", "|---|---|---|",
                  "| " + " | ".join(str(result.get(k)) for k in peer) + " |"]
    engine = result.get("engine")
    if engine:
        lines += ["", "| real SceneDet on an engine backend | frames/s | attainment |", "|---|---|---|",
                  f"| {engine['session']} | {engine['rate_rps']} | {engine['attainment']} |"]
    front = result.get("front")
    if front:
        lines += ["", "| cameras | goodput, vigil serve | goodput, --cluster | ratio | --cluster, streams and apps "
                  "in the front door | actors / front door | priority camera, one process "
                  "| priority camera, --cluster |", "|---|---|---|---|---|---|---|---|",
                  f"| {front['cameras']} | {front['local_goodput_fps']} | {front['cluster_goodput_fps']} | "
                  f"{front['cluster_vs_local']} | {front.get('cluster_in_front_goodput_fps')} | "
                  f"{front.get('actors_vs_in_front')} | {front['local_high_attainment']} | "
                  f"{front['cluster_high_attainment']} |"]
    sim = result["sim"]
    lines += ["", f"| simulated devices (occupancy <= {sim.get('max_occupancy')}) | efficiency | attainment |",
              "|---|---|---|"]
    lines += [f"| {d} | {e} | {a} |" for d, e, a in zip(sim["devices"], sim["efficiency"], sim["attainment"])]
    return "\n".join(lines)


if __name__ == "__main__":
    import json

    print(json.dumps(run_cluster_bench(ClusterBenchOptions()), indent=2))
