"""The KV cache's blocks, reference-counted, with automatic prefix caching (vLLM's).

A full block is named by a hash of its tokens and of the hash of the block before it, so
a name stands for the whole prefix up to the block's end: two requests whose prompts
start alike name their first blocks alike, and K/V depend on nothing else (the
positions are the same). A named block stays in the cache after its last request lets
it go, on the free list; a new request whose prefix names it takes it back instead of
computing it again. The free list is least-recently-freed first, so what is handed out
(and loses its name) is what went unused longest; a request's blocks are freed last
block first, so its shared beginning outlives its own tail.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict


def chain_hash(parent: bytes | None, tokens: list[int]) -> bytes:
    """A block's name: its tokens and its parent's name, 128 bits (a collision would reuse
    another prefix's K/V, so the name is a cryptographic digest, not Python's hash)."""
    digest = hashlib.blake2b(parent or b"", digest_size=16)
    digest.update(array("q", tokens).tobytes())
    return digest.digest()


class BlockPool:
    """Every block is free (reference count 0, on the free list, perhaps still named)
    or held by the requests that count in its reference count."""

    def __init__(self, num_blocks: int, caching: bool = True) -> None:
        self.num_blocks = num_blocks
        self.caching = caching
        self.refs = [0] * num_blocks
        self.name: list[bytes | None] = [None] * num_blocks
        self.named: dict[bytes, int] = {}
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self, n: int) -> list[int]:
        """`n` blocks of the free list's front, their names forgotten (their K/V is about
        to be overwritten)."""
        if n > len(self._free):
            raise RuntimeError(f"asked for {n} KV blocks with {len(self._free)} free")  # scheduler bug
        out = []
        for _ in range(n):
            block, _ = self._free.popitem(last=False)
            self._forget(block)
            self.refs[block] = 1
            out.append(block)
        return out

    def free(self, blocks: list[int]) -> None:
        for block in reversed(blocks):
            self.refs[block] -= 1
            if self.refs[block] < 0:
                raise RuntimeError(f"KV block {block} freed more often than held")  # scheduler bug
            if self.refs[block] == 0:
                self._free[block] = None

    def take(self, blocks: list[int]) -> None:
        """Hold named blocks found by `lookup` (a free one leaves the free list)."""
        for block in blocks:
            if self.refs[block] == 0:
                del self._free[block]
            self.refs[block] += 1

    def cache(self, block: int, name: bytes) -> None:
        """Name a held, full, computed block; a name already given keeps its first block."""
        if self.caching and self.name[block] is None and name not in self.named:
            self.name[block] = name
            self.named[name] = block

    def lookup(self, names: list[bytes]) -> list[int]:
        """The blocks of the longest run of `names`, from the first, that are cached."""
        found = []
        for name in names:
            block = self.named.get(name)
            if block is None:
                break
            found.append(block)
        return found

    def free_among(self, blocks: list[int]) -> int:
        return sum(1 for b in blocks if self.refs[b] == 0)

    def _forget(self, block: int) -> None:
        name = self.name[block]
        if name is not None:
            self.name[block] = None
            if self.named.get(name) == block:
                del self.named[name]
