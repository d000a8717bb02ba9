"""Decode steps replayed as CUDA graphs.

On a GPU a small model's decode step is a few hundred microseconds of kernels behind
milliseconds of Python and kernel launches, so a step costs about the same at any
batch size and its launches are what limit throughput. A CUDA graph records the launches
of one step once and replays them in one call. A graph replays fixed shapes at fixed
addresses, so (as vLLM does) one graph is captured per padded batch size, over
`LlamaModel.decode_static`: the batch is padded to the next captured size with rows
that write to a scratch block and read nothing else, and every request gathers the
same number of blocks (masked past its length).

Prefill and mixed steps run eagerly; so does everything on a CPU, where a graph buys
nothing. `capture=False` runs the same padded static step eagerly: the tests check its
tokens on a CPU, the graph on a GPU.
"""

from __future__ import annotations

import logging
import time

import torch

from llm.model import LlamaModel

log = logging.getLogger("vigil.llm")


def batch_sizes(max_batch: int) -> list[int]:
    """1, 2, 4, 8, then every 8 up to max_batch (vLLM's spacing): padding wastes at most 7 rows."""
    sizes = [n for n in (1, 2, 4) if n < max_batch] + list(range(8, max_batch + 8, 8))
    return sorted({min(n, max_batch) for n in sizes})


class DecodeGraphs:
    """Runs decode-only steps through `decode_static`, captured as CUDA graphs when
    `capture`. `scratch_block` is a KV block that no request holds: padding rows write
    their K/V there, and block tables are padded with it."""

    def __init__(self, model: LlamaModel, kv: torch.Tensor, block_size: int, max_blocks_per_seq: int,
                 max_batch: int, scratch_block: int, capture: bool) -> None:
        self.model, self.kv, self.block_size = model, kv, block_size
        self.max_blocks = max_blocks_per_seq
        self.scratch_block = scratch_block
        self.sizes = batch_sizes(max_batch)
        self.capture = capture
        self.steps = 0  # decode steps run through here
        self._meta: dict[int, torch.Tensor] = {}  # size -> static input [size, 4 + B]
        self._logits: dict[int, torch.Tensor] = {}  # size -> static output
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        if capture:
            self._capture_all()

    @property
    def max_batch(self) -> int:
        return self.sizes[-1]

    def _padding_row(self) -> list[int]:
        # token 0 at position 0, written to the scratch block's first slot, attending only to it
        return [0, 0, self.scratch_block * self.block_size, 1] + [self.scratch_block] * self.max_blocks

    def _capture_all(self) -> None:
        t0 = time.perf_counter()
        pool = torch.cuda.graph_pool_handle()
        device = self.kv.device
        for size in reversed(self.sizes):  # the largest first: the smaller ones reuse its memory
            meta = torch.tensor([self._padding_row()] * size, dtype=torch.int64, device=device)
            side = torch.cuda.Stream(device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):  # warm-up off the capture: lazy initialisation, workspace sizes
                for _ in range(2):
                    self.model.decode_static(meta, self.kv, self.block_size)
            torch.cuda.current_stream(device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):  # vision may run beside
                logits = self.model.decode_static(meta, self.kv, self.block_size)
            self._meta[size], self._logits[size], self._graphs[size] = meta, logits, graph
        torch.cuda.synchronize(device)
        log.info("captured %d decode graphs (batch sizes %s) in %.2f s", len(self.sizes), self.sizes,
                 time.perf_counter() - t0)

    def run(self, rows: list[list[int]]) -> torch.Tensor:
        """rows: one per decoding request, (token, position, slot, context length, block
        table...) with tables of at most `max_blocks` entries. Returns logits [len(rows), vocab]."""
        n = len(rows)
        size = next(s for s in self.sizes if s >= n)
        width = 4 + self.max_blocks
        pad = self._padding_row()
        padded = [r + pad[len(r):] for r in rows] + [pad] * (size - n)  # tables padded with the scratch block
        host = torch.tensor(padded, dtype=torch.int64)
        assert host.shape == (size, width)
        self.steps += 1
        if not self.capture:
            return self.model.decode_static(host.to(self.kv.device), self.kv, self.block_size)[:n]
        self._meta[size].copy_(host, non_blocking=True)
        self._graphs[size].replay()
        return self._logits[size][:n]
