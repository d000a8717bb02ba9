"""The cluster bench's front-door phase: `vigil serve --cluster` beside `vigil serve`,
the serve bench's cameras on both (bench/serve.py: N looping clips, each with the people
counter; the first at priority 10).

The cluster is one `ray start --head` on loopback with a logical GPU, on the same two
cores as the server, so the backend's engine, the streams' ingest and app actors (or
the front door's decoders and apps) and Ray's own processes share them: the ratio
measures what the hops through Ray cost (the frames to the object store and back, the
router, the round trip in every deadline), not what a second machine would add. Three
servers run one after the other, `repeats` times each, alternating, with the same
warm-up and window: in one process, on the cluster with each stream's ingest and app
actors (the default), and on the cluster with streams and apps in the front door.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path
from typing import Callable

from bench.serve import ServeBenchOptions, measure_point


def front_phase(cameras: int, window_s: float, warmup_s: float, repeats: int, log: Callable[[str], None]) -> dict:
    from cluster.local import RayHead

    log(f"vigil serve --cluster beside vigil serve: {cameras} cameras, {repeats} alternating runs of each")
    options = ServeBenchOptions(counts=(cameras,), warmup_s=warmup_s, window_s=window_s, captions_n=())
    local, clustered, in_front = [], [], []
    for _ in range(repeats):
        local.append(measure_point(cameras, options, log))
        for actors, points in ((True, clustered), (False, in_front)):
            with tempfile.TemporaryDirectory(prefix="vigil-bench-ray-") as tmp:
                head = RayHead(Path(tmp) / "ray").start()
                try:
                    points.append(measure_point(cameras, options, log, cluster=head.address, actors=actors))
                finally:
                    head.stop()
    good_local, good_cluster, good_front = (round(statistics.median(p["goodput_fps"] for p in points), 2)
                                            for points in (local, clustered, in_front))
    result = {"cameras": cameras, "local_goodput_fps": good_local, "cluster_goodput_fps": good_cluster,
              "cluster_vs_local": round(good_cluster / good_local, 3) if good_local else None,
              "cluster_in_front_goodput_fps": good_front,
              "actors_vs_in_front": round(good_cluster / good_front, 3) if good_front else None,
              "local_high_attainment": [p["high_attainment"] for p in local],
              "cluster_high_attainment": [p["high_attainment"] for p in clustered],
              "local": local, "cluster": clustered, "cluster_in_front": in_front}
    log(f"  goodput {good_cluster} on the cluster against {good_local} in one process "
        f"(x{result['cluster_vs_local']}); {good_front} with streams and apps in the front door (actors "
        f"x{result['actors_vs_in_front']}); priority camera {result['cluster_high_attainment']} against "
        f"{result['local_high_attainment']}")
    return result
