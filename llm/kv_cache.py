"""The paged KV cache (vLLM): one tensor of fixed-size blocks, a pool that hands them out
and caches full blocks by their prefix (llm/block_pool.py), and the addressing a step
is built from.

A request holds a block table, the pool blocks its positions live in, in order:
position p is in block `table[p // block_size]` at offset `p % block_size`, so its K/V
slot in the flattened cache is `table[p // block_size] * block_size + p % block_size`.
A request with `n` computed tokens holds `ceil(n / block_size)` blocks.

`prepare_inputs` flattens a step's scheduled tokens, request after request, into the
tokens, positions, slot mapping and per-request slices (with block tables) that the
eager step (`LlamaModel.forward`) and the padded captured step (llm/cuda_graphs.py)
both consume: a step's inputs are built one way whichever runs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from llm.block_pool import BlockPool, chain_hash
from llm.model import Batch, LlamaConfig, SeqBatch

if TYPE_CHECKING:
    from llm.requests import LLMRequest


def new_kv_cache(cfg: LlamaConfig, num_blocks: int, block_size: int, device: str = "cpu") -> torch.Tensor:
    """[layers, 2, num_blocks, kv_heads, block_size, head_dim] float32, zeroed: a block
    holds each kv head's keys (or values) as one contiguous [block_size, head_dim] tile."""
    return torch.zeros(cfg.num_hidden_layers, 2, num_blocks, cfg.num_key_value_heads, block_size, cfg.head_dim,
                       device=device)


def slot_mapping(block_table: list[int], start: int, num_tokens: int, block_size: int) -> list[int]:
    """The cache slots of positions start .. start+num_tokens-1: each one's block's place
    in the pool, then its offset in the block."""
    return [block_table[p // block_size] * block_size + p % block_size for p in range(start, start + num_tokens)]


class KVCacheManager:
    """Requests' KV blocks: the one place they are handed out (`allocate_slots`, or
    `attach` for cached prefix blocks) and given back (`free`), and where full blocks are
    named for the prefix cache (llm/block_pool.py). A request's block table is
    `request.blocks`."""

    def __init__(self, num_blocks: int, block_size: int = 16, caching: bool = True) -> None:
        self.pool = BlockPool(num_blocks, caching)
        self.block_size = block_size

    @property
    def num_blocks(self) -> int:
        return self.pool.num_blocks

    @property
    def num_free(self) -> int:
        return self.pool.num_free

    @property
    def usage(self) -> float:
        return 1.0 - self.pool.num_free / self.pool.num_blocks

    def allocate_slots(self, request: "LLMRequest", num_blocks: int) -> None:
        """`num_blocks` more blocks at the end of the request's table."""
        request.blocks += self.pool.allocate(num_blocks)

    def lookup(self, request: "LLMRequest") -> tuple[list[int], int]:
        """For a request that holds nothing yet: the cached blocks of its longest cached
        prefix (at least its last token is left to compute, so that it samples), and how
        many of those are on the free list (taking them costs free blocks)."""
        if not self.pool.caching or request.blocks or request.num_computed_tokens:
            return [], 0
        names = self.names(request, (request.num_tokens - 1) // self.block_size)
        found = self.pool.lookup(names)
        return found, self.pool.free_among(found)

    def attach(self, request: "LLMRequest", blocks: list[int]) -> None:
        """Start the request on cached blocks: their tokens count as computed."""
        self.pool.take(blocks)
        request.blocks = list(blocks)
        request.num_named_blocks = len(blocks)
        request.num_computed_tokens = len(blocks) * self.block_size

    def cache_full_blocks(self, request: "LLMRequest") -> None:
        """Name the request's blocks that its computed tokens have filled."""
        full = min(request.num_computed_tokens // self.block_size, len(request.blocks))
        if not self.pool.caching or full <= request.num_named_blocks:
            return
        names = self.names(request, full)
        for i in range(request.num_named_blocks, full):
            self.pool.cache(request.blocks[i], names[i])
        request.num_named_blocks = full

    def names(self, request: "LLMRequest", num_blocks: int) -> list[bytes]:
        """The names of the request's first `num_blocks` full blocks (kept on the request:
        its tokens never change, so neither do they). The first block's parent is the
        request's adapter as loaded: the same tokens through another adapter have other K/V."""
        have = request.block_names
        for i in range(len(have), num_blocks):
            have.append(chain_hash(have[-1] if have else request.cache_salt, request.token_ids(i * self.block_size,
                                                                                 self.block_size)))
        return have[:num_blocks]

    def freeable(self, request: "LLMRequest") -> int:
        """Blocks that freeing the request would put on the free list: those it holds alone."""
        return sum(1 for b in request.blocks if self.pool.refs[b] == 1)

    def free(self, request: "LLMRequest") -> None:
        self.pool.free(request.blocks)
        request.blocks = []
        request.num_named_blocks = 0


@dataclass
class StepInputs:
    """One step's scheduled tokens flattened into one sequence [T], request after request."""

    token_ids: list[int]  # [T]
    positions: list[int]  # [T]
    slot_mapping: list[int]  # [T] the cache slot each token's K/V is written to
    seqs: list[SeqBatch]  # each request's slice of the T tokens, its context length and block table

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    def batch(self, block_size: int, device: torch.device) -> Batch:
        """The eager step's input, on `device`."""
        return Batch(torch.tensor(self.token_ids, device=device), torch.tensor(self.positions, device=device),
                     self.seqs, torch.tensor(self.slot_mapping, device=device), block_size)


def prepare_inputs(scheduled: list[tuple[LLMRequest, int]], block_size: int) -> StepInputs:
    """scheduled: (request, tokens it computes this step), its blocks already allocated."""
    tokens: list[int] = []
    positions: list[int] = []
    slots: list[int] = []
    seqs: list[SeqBatch] = []
    for req, n in scheduled:
        start = req.num_computed_tokens
        seqs.append(SeqBatch(len(tokens), n, start + n, list(req.blocks)))
        tokens += req.token_ids(start, n)
        positions += range(start, start + n)
        slots += slot_mapping(req.blocks, start, n, block_size)
    return StepInputs(tokens, positions, slots, seqs)
