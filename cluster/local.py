"""A Ray cluster of several nodes on this machine, on loopback: for the cluster bench
and tests (each node a raylet of its own, with logical GPUs).

Ray turns 127.0.0.1 into the host's routable address before it connects, so a driver
on a host whose routable address refuses local connections (a sandbox, a firewall)
waits for the head forever. `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` tells Ray the
cluster is one host, and it keeps to loopback; it is read when Ray is imported, so
`loopback()` must run before the first `import ray` of the process (and the nodes,
started from this process, inherit it). A real cluster across hosts is started with
`ray start` instead, and never needs it.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Iterator

LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def loopback() -> None:
    """Keep Ray on 127.0.0.1 in this process and the nodes it starts."""
    if "ray" in sys.modules and os.environ.get(LOOPBACK_ENV) != "0":
        raise RuntimeError("Ray was imported before cluster.local.loopback(); it would resolve 127.0.0.1 to the "
                           f"host's routable address (set {LOOPBACK_ENV}=0 before importing Ray)")
    os.environ[LOOPBACK_ENV] = "0"


@contextmanager
def local_cluster(nodes: int, gpus_per_node: int, health_period_ms: int = 500, failure_threshold: int = 3,
                  namespace: str = "vigil") -> Iterator[tuple[object, list]]:
    """(the `ray.cluster_utils.Cluster`, its worker nodes), with this process connected.
    Ray's health checks at `health_period_ms` x `failure_threshold`: a lost node is
    noticed in about 1.5 s, not Ray's default 16."""
    if not (1 <= nodes <= 16 and 0 <= gpus_per_node <= 16):
        raise ValueError("nodes must be 1 to 16 and gpus_per_node 0 to 16")
    loopback()
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "node_ip_address": "127.0.0.1",
        "_system_config": {"health_check_period_ms": health_period_ms,
                           "health_check_failure_threshold": failure_threshold,
                           "health_check_initial_delay_ms": 1000}})
    try:
        workers = [cluster.add_node(num_cpus=1, num_gpus=gpus_per_node, node_ip_address="127.0.0.1")
                   for _ in range(nodes)]
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, namespace=namespace, logging_level="ERROR", log_to_driver=False)
        try:
            yield cluster, workers
        finally:
            ray.shutdown()
    finally:
        cluster.shutdown()
