"""Model steps replayed as CUDA graphs.

On a GPU a small model's step is launch-bound: its kernels take less time than the
Python and the launches that issue them, so the launches are what limit throughput.
A CUDA graph records the launches of one step once and replays
them in one call. A graph replays fixed shapes at fixed addresses, so one graph is
captured per padded number of tokens, over `LlamaModel.forward_static`: the step's
tokens are padded to the next captured size with rows that write to a scratch block
and read nothing else, and every token gathers the same number of blocks (masked past
its position). Prefill tokens are rows like decode tokens, each attending to the
positions up to its own (causal), so mixed steps replay a graph too, and a prompt's
arrival does not send its whole step back to eager launches.

Steps with more tokens than the largest graph run eagerly; so does everything on a CPU,
where a graph buys nothing and gathering every block for every prompt token would cost
much. `capture=False` runs the same padded static step eagerly: the tests check its
tokens on a CPU, the graphs on a GPU.
"""

from __future__ import annotations

import logging
import time

import torch

from llm.kv_cache import StepInputs
from llm.model import LlamaModel

log = logging.getLogger("vigil.llm")

GATHER_BUDGET_BYTES = 1 << 30  # the largest graph's gathered K/V per layer; fewer tokens per graph beyond


def graph_sizes(max_tokens: int) -> list[int]:
    """1, 2, 4, 8, every 8 up to 32 (decode batches, where padding costs most), then
    x1.5 steps: padding wastes at most a third of a large step's rows."""
    sizes, n = [1, 2, 4, 8, 16, 24, 32], 32
    while n < max_tokens:
        n = (n * 3 // 2 + 7) // 8 * 8
        sizes.append(n)
    return sorted({min(s, max_tokens) for s in sizes})


class StepGraphs:
    """Runs steps of up to `max_tokens` tokens through `forward_static`, captured as
    CUDA graphs when `capture`. `scratch_block` is a KV block that no request holds:
    padding rows write their K/V there, and block tables are padded with it."""

    def __init__(self, model: LlamaModel, kv: torch.Tensor, block_size: int, max_blocks_per_seq: int,
                 max_tokens: int, scratch_block: int, capture: bool) -> None:
        self.model, self.kv, self.block_size = model, kv, block_size
        self.max_blocks = max_blocks_per_seq
        self.scratch_block = scratch_block
        row_bytes = 2 * max_blocks_per_seq * kv[0, 0, 0].numel() * kv.element_size()
        self.sizes = graph_sizes(max(1, min(max_tokens, GATHER_BUDGET_BYTES // row_bytes)))
        self.capture = capture
        self.steps = 0  # steps run through here
        self._meta: dict[int, torch.Tensor] = {}  # size -> static input [size, 4 + B]
        self._logits: dict[int, torch.Tensor] = {}  # size -> static output
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        if capture:
            self._capture_all()

    @property
    def max_tokens(self) -> int:
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
            with torch.cuda.stream(side):  # warm-up off the capture: lazy initialisation
                for _ in range(2):
                    self.model.forward_static(meta, self.kv, self.block_size)
            torch.cuda.current_stream(device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):  # vision may run beside
                logits = self.model.forward_static(meta, self.kv, self.block_size)
            self._meta[size], self._logits[size], self._graphs[size] = meta, logits, graph
        torch.cuda.synchronize(device)
        log.info("captured %d step graphs (tokens %s) in %.2f s", len(self.sizes), self.sizes,
                 time.perf_counter() - t0)

    def run(self, inputs: StepInputs) -> torch.Tensor:
        """Runs a step of at most `max_tokens` tokens, block tables of at most
        `max_blocks` entries. Returns the logits of each request's last token this
        step, [len(inputs.seqs), vocab], as `LlamaModel.forward` does."""
        rows, last = [], []
        for seq in inputs.seqs:  # a row per token: (token, position, slot, context length, block table...)
            for j in range(seq.start, seq.start + seq.num_tokens):
                p = inputs.positions[j]
                rows.append([inputs.token_ids[j], p, inputs.slot_mapping[j], p + 1, *seq.block_table])
            last.append(len(rows) - 1)
        n = len(rows)
        size = next(s for s in self.sizes if s >= n)
        pad = self._padding_row()
        padded = [r + pad[len(r):] for r in rows] + [pad] * (size - n)  # tables padded with the scratch block
        host = torch.tensor(padded, dtype=torch.int64)
        self.steps += 1
        if not self.capture:
            logits = self.model.forward_static(host.to(self.kv.device), self.kv, self.block_size)[:n]
        else:
            self._meta[size].copy_(host, non_blocking=True)
            self._graphs[size].replay()
            logits = self._logits[size][:n]
        return logits if len(last) == n else logits[torch.tensor(last, device=logits.device)]
