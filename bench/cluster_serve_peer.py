"""The cluster bench's peer: the same workload on Ray Serve, one deployment per session
with Serve's own autoscaling, on a fresh local cluster of the same nodes and logical GPUs.

A replica holds a whole logical GPU (`num_gpus=1`): Serve places replicas of one
deployment, and several models' batches sharing one device's duty cycle is what
Vigil's planner adds. So that the comparison is of placement and not of execution,
a replica runs as a Vigil backend does: it batches with `@serve.batch` up to the
session's largest batch B (the largest whose latency fits twice in the SLO, as Vigil's
planner computes it), waits at most one such batch for it to fill, and sleeps l(b)
from the session's profile. Autoscaling is tuned as Serve's guide says for batching
deployments: `target_ongoing_requests` B, `max_ongoing_requests` 2B (one batch running,
one filling), from one replica up to every GPU of the cluster, a one-second upscale
delay. After the replicas settle, one window measures the replicas running (the
devices Serve holds, sampled every second: their most and their mean) and attainment
over the requests sent in it, by the same Traffic as Vigil's phases.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from concurrent.futures import Future
from typing import Callable

from cluster.placement import Workload, largest_batch

SAMPLE_S = 1.0


def _deployment(w: Workload, batch: int, max_replicas: int):
    from ray import serve

    profile = w.profile
    wait_s = profile.latency_ms(batch) / 1000.0

    @serve.deployment(name=w.session, ray_actor_options={"num_gpus": 1, "num_cpus": 0},
                      max_ongoing_requests=2 * batch,
                      autoscaling_config={"min_replicas": 1, "initial_replicas": 1, "max_replicas": max_replicas,
                                          "target_ongoing_requests": batch, "upscale_delay_s": 1.0,
                                          "downscale_delay_s": 10.0, "metrics_interval_s": 0.5,
                                          "look_back_period_s": 2.0})
    class Session:
        @serve.batch(max_batch_size=batch, batch_wait_timeout_s=wait_s)
        async def __call__(self, items: list[int]) -> list[str]:
            await asyncio.sleep(profile.latency_ms(len(items)) / 1000.0)
            return ["ok"] * len(items)

    return Session.bind()


class ServeRouter:
    """Traffic's router interface over deployment handles: each request awaited on an
    event loop of its own thread; its future resolves `("ok",)`, or `("error",)` when
    Serve failed it (the outcome first, as cluster/router.py's)."""

    def __init__(self, handles: dict) -> None:
        self.handles = handles
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="serve-router", daemon=True)
        self._thread.start()

    def submit(self, session: str, items: list[tuple[int, float]]) -> list[Future]:
        return [asyncio.run_coroutine_threadsafe(self._one(session), self.loop) for _ in items]

    async def _one(self, session: str) -> tuple[str]:
        try:
            return (await self.handles[session].remote(0),)
        except Exception:  # a replica lost or a request rejected: a miss, counted as such
            return ("error",)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)


def _running_replicas(names: list[str]) -> int:
    from ray import serve

    status = serve.status()
    running = 0
    for name in names:
        app = status.applications.get(name)
        if app is not None:
            running += sum(d.replica_states.get("RUNNING", 0) for d in app.deployments.values())
    return running


def serve_peer(nodes: int, gpus_per_node: int, workloads: list[Workload], slo_ms: dict[str, float], settle_s: float,
               window_s: float, seed: int, log: Callable[[str], None]) -> dict:
    """{ray_serve_devices_used (most replicas running in the window), ray_serve_devices_mean,
    ray_serve_attainment}; all None when Ray Serve is not installed."""
    from bench.traffic import Traffic
    from cluster.local import local_cluster

    # the replicas' answer to Serve's queue-length probe comes later than its 0.1 s
    # default on two cores hosting five raylets, and requests then wait on retries
    os.environ.setdefault("RAY_SERVE_QUEUE_LENGTH_RESPONSE_DEADLINE_S", "1.0")
    try:
        from ray import serve
    except ImportError as exc:
        log(f"  Ray Serve is not installed ({exc}; pip install 'ray[serve]'): peer skipped")
        return {"ray_serve_devices_used": None, "ray_serve_devices_mean": None, "ray_serve_attainment": None}
    log(f"Ray Serve peer: a fresh cluster of {nodes} nodes of {gpus_per_node} logical GPUs, "
        f"{len(workloads)} deployments")
    with local_cluster(nodes, gpus_per_node):
        logging.getLogger("ray.serve").setLevel(logging.WARNING)  # a line per application started
        serve.start(proxy_location="Disabled")
        router = traffic = None
        try:
            handles = {}
            for w in workloads:
                handles[w.session] = serve.run(_deployment(w, max(1, largest_batch(w, {})), nodes * gpus_per_node),
                                               name=w.session, route_prefix=None)
            router = ServeRouter(handles)
            traffic = Traffic(router, workloads, slo_ms, seed)
            time.sleep(settle_s)
            start, replicas = traffic.now(), []
            while traffic.now() - start < window_s:
                time.sleep(SAMPLE_S)
                replicas.append(_running_replicas(list(handles)))
            end = traffic.now()
            traffic.stop()
            time.sleep(max(slo_ms.values()) / 1000.0 + 1.0)
            attainment, counts = traffic.attainment(start, end)
        finally:
            if traffic is not None:
                traffic.stop()
            if router is not None:
                router.close()
            serve.shutdown()
    result = {"ray_serve_devices_used": max(replicas), "ray_serve_devices_mean": round(sum(replicas) / len(replicas), 2),
              "ray_serve_attainment": attainment}
    log(f"  Ray Serve: {result['ray_serve_devices_used']} replicas (devices) at most, "
        f"{result['ray_serve_devices_mean']} on average; attainment {attainment} ({dict(counts)})")
    return result
