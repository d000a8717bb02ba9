"""Where a stream of `vigil serve --cluster` runs: its ingest actor (cluster/ingest.py)
and its app actor (cluster/app_host.py), placed near the frames' use.

Each stream's two actors go to one node that runs engine backends, taken in turn, so
streams spread over the devices' nodes and a block's frames are decoded on a node
where a backend reads them. The affinity is soft: Ray places an actor elsewhere when
that node is full or lost, and a restarted actor may land on another node. They take
no CPU slot (`num_cpus=0`): slots are the backends'.
"""

from __future__ import annotations

import itertools
from typing import Callable

from cluster.app_host import HostClient
from cluster.ingest import RemoteStream
from core.clock import monotonic_ms
from streams.options import StreamOptions


class StreamActors:
    def __init__(self, nodes: list[str]) -> None:
        """`nodes`: the Ray node ids that run backends."""
        self.nodes = list(dict.fromkeys(nodes))
        self._turn = itertools.count()

    def _placement(self) -> object:
        if not self.nodes:
            return "DEFAULT"
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return NodeAffinitySchedulingStrategy(self.nodes[next(self._turn) % len(self.nodes)], soft=True)

    def start(self, name: str, url: str, options: StreamOptions, start_ms: float, shown_url: str,
              clock: Callable[[], float] = monotonic_ms,
              recording: dict | None = None) -> tuple[RemoteStream, HostClient]:
        """A stream's ingest actor (read as its `ManagedStream`; `recording`, as
        `IngestActor`'s) and its app actor (whose `app` builds the stream's apps; closed
        once the stream's worker is done)."""
        placement = self._placement()
        return (RemoteStream(name, url, options, start_ms, shown_url, placement, clock, recording),
                HostClient(name, placement))
