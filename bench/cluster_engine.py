"""The cluster bench's real-model phase: SceneDet served by a backend that runs Vigil's
engine (cluster/engine_backend.py), on a fresh loopback cluster of one node, with
rendered frames sent through the scheduler's router as Poisson arrivals.

Where the main phases' backends sleep l(b), this one computes, on the same two cores
as everything else: it shows the path of a real request (a frame through Ray to the
engine and its detections back) and its attainment at a modest rate, not a device's
capacity.
"""

from __future__ import annotations

import time
from typing import Callable

from bench.traffic import Traffic
from cluster.epochs import EpochPolicy
from cluster.placement import Workload
from engine.profiles import Profile

SESSION = "scenedet:2"
SLO_MS = 1000.0
FRAMES = 16  # rendered once, sent round robin
WARMUP_S = 3.0


def engine_phase(seconds: float, rate_rps: float, seed: int, log: Callable[[str], None]) -> dict:
    from cluster.local import local_cluster, loopback

    loopback()  # before Ray is imported
    import ray

    from cluster.backend import BackendConfig, start_backend
    from cluster.router import Router
    from cluster.scheduler import scheduler_handle
    from sample_videos.render import RenderConfig, Renderer
    from vigil.settings import MODELS_DIR

    log(f"real SceneDet: a node with a backend running Vigil's engine, {rate_rps:g} frames/s for {seconds:g} s")
    frames = [f.image for _, f in zip(range(FRAMES), Renderer(RenderConfig(seed=seed + 9300)).frames(every=7))]
    with local_cluster(nodes=1, gpus_per_node=1) as (_, nodes):
        # one plan, kept: the phase measures serving, not re-planning
        scheduler = scheduler_handle(EpochPolicy(beacon_s=0.5, epoch_s=3600.0, min_epoch_s=3600.0))
        backend = start_backend(BackendConfig("engine0", beacon_s=0.5, executor="engine",
                                              models_dir=str(MODELS_DIR)), nodes[0].node_id)
        # the planner's view of the device; the engine batches by its own measured profile
        workload = Workload(SESSION, rate_rps, SLO_MS, Profile.linear(10.0, 20.0, 16, "planned", "cpu"))
        ray.get(scheduler.add_session.remote(workload))
        deadline = time.monotonic() + 600
        while not ((r := ray.get(backend.report.remote()))["sessions"] and not r["loading"]):
            if time.monotonic() > deadline:
                raise RuntimeError("timed out waiting for the engine backend to load SceneDet")
            time.sleep(0.2)
        router = Router(scheduler, "bench-engine", refresh_s=0.1)
        traffic = None
        try:
            traffic = Traffic(router, [workload], {SESSION: SLO_MS}, seed, payload=lambda rid: frames[rid % FRAMES])
            time.sleep(WARMUP_S + seconds)
            end = traffic.now()
            traffic.stop()
            time.sleep(SLO_MS / 1000.0 + 1.0)
            attainment, counts = traffic.attainment(WARMUP_S, end)
            report = ray.get(backend.report.remote())
        finally:
            if traffic is not None:
                traffic.stop()
            router.close()
    log(f"  attainment {attainment} ({dict(counts)}); backend outcomes {report['outcomes']}")
    return {"session": SESSION, "rate_rps": rate_rps, "slo_ms": SLO_MS, "attainment": attainment,
            "outcomes": dict(counts), "backend_outcomes": report["outcomes"]}
