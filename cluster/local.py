"""A Ray cluster of several nodes on this machine, on loopback: for the cluster bench
and tests (each node a raylet of its own, with logical GPUs), in this process
(`local_cluster`) or started as a user starts one (`RayHead`: `ray start --head`).

Ray turns 127.0.0.1 into the host's routable address before it connects, so a driver
on a host whose routable address refuses local connections (a sandbox, a firewall)
waits for the head forever. `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` tells Ray the
cluster is one host, and it keeps to loopback; it is read when Ray is imported, so
`loopback()` must run before the first `import ray` of the process (and the nodes,
started from this process, inherit it). A real cluster across hosts is started with
`ray start` instead, and never needs it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
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


class RayHead:
    """`ray start --head --block` on loopback with its own port and temp dir, as a user
    starts a cluster's first node (here with logical GPUs, and health checks tuned as
    `local_cluster`'s); stopped by signalling its process group, so that no other Ray on
    the machine is touched (`ray stop` would)."""

    def __init__(self, temp_dir: Path, num_cpus: int = 1, num_gpus: int = 1, health_period_ms: int = 500,
                 failure_threshold: int = 3) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.temp_dir = temp_dir
        self.num_cpus, self.num_gpus = num_cpus, num_gpus
        self.system_config = json.dumps({"health_check_period_ms": health_period_ms,
                                         "health_check_failure_threshold": failure_threshold})
        self.log = temp_dir.parent / f"{temp_dir.name}-ray.log"
        self.proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 120.0) -> "RayHead":
        ray = Path(sys.executable).with_name("ray")
        env = {**os.environ, LOOPBACK_ENV: "0"}  # see the module docstring
        self._log = open(self.log, "a")
        self.proc = subprocess.Popen(
            [str(ray), "start", "--head", "--block", "--node-ip-address", "127.0.0.1", "--port", str(self.port),
             "--num-cpus", str(self.num_cpus), "--num-gpus", str(self.num_gpus), "--temp-dir", str(self.temp_dir),
             "--include-dashboard", "false", "--disable-usage-stats", "--system-config", self.system_config],
            env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while "Ray runtime started" not in self.log.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"ray start --head did not start; {self.log} ends: {self.log.read_text()[-2000:]}")
            time.sleep(0.3)
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after `timeout_s`: `ray start --block` answers SIGTERM by
        waiting on each of its processes' grace in turn, over 30 s, and this head's state
        is its temp dir's, thrown away with it."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self._log.close()
