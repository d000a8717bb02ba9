"""An LLM request's state, and the handle its caller holds.

A request is counters (vLLM v1): `num_tokens` (prompt + generated) and
`num_computed_tokens`; whether it is prefilling or decoding follows from them. Its
block table (`blocks`) is what it holds of the KV cache (llm/kv_cache.py). Outputs go
to a queue the engine's thread fills and the caller's thread (or event loop) drains.
"""

from __future__ import annotations

import asyncio
import queue
from dataclasses import dataclass, field
from typing import AsyncIterator, Callable, Iterable, Iterator

import torch

from llm.sampling import SamplingParams
from llm.step_plan import SeqState
from llm.structured import GrammarState


@dataclass
class Output:
    """One streamed piece: new text and token ids; `finish_reason` on the last."""

    text: str
    token_ids: list[int]
    finish_reason: str | None = None
    error: str | None = None  # with finish_reason "error": what failed


@dataclass
class LLMRequest:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    priority: int
    arrival: float
    output_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    blocks: list[int] = field(default_factory=list)  # block table: the KV blocks of its positions, in order
    block_names: list[bytes] = field(default_factory=list)  # prefix-cache names of its full blocks, as computed
    num_named_blocks: int = 0  # of `blocks`, those given their names in the cache
    generator: torch.Generator | None = None
    grammar: GrammarState | None = None  # a structured output's place in its grammar
    lora: str | None = None  # the adapter it runs with, by name (None: the base model)
    cache_salt: bytes | None = None  # its first prefix-cache block's parent: the adapter's, as loaded
    num_forced: int = 0  # output tokens the grammar forced (jump-forward), computed without a pass each
    text: str = ""  # detokenized output so far (stop strings cut here)
    prefix_offset: int = 0  # incremental detokenization: output_ids[prefix_offset:read_offset] were
    read_offset: int = 0  # decoded last time, as the context for the next piece
    sent: int = 0  # characters of `text` already streamed
    finish_reason: str | None = None
    error: str | None = None
    first_token_s: float | None = None
    last_token_s: float | None = None
    num_preemptions: int = 0
    outputs: "queue.Queue[Output]" = field(default_factory=queue.Queue)
    stream: bool = True  # text pieces as they are generated; else one piece at the end
    waker: Callable[[], None] | None = None  # called (on the engine's thread) after each output

    def token_ids(self, start: int, n: int) -> list[int]:
        """Tokens start .. start+n-1 of prompt + output, without copying the whole
        sequence (a decode step asks each request for one token)."""
        prompt = len(self.prompt_ids)
        if start >= prompt:
            return self.output_ids[start - prompt:start - prompt + n]
        return self.prompt_ids[start:start + n] + self.output_ids[:max(0, start + n - prompt)]

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    def state(self, freeable: int | None = None, cached_blocks: int = 0, cached_free: int = 0) -> SeqState:
        return SeqState(self.request_id, self.num_tokens, self.num_computed_tokens, len(self.blocks), self.priority,
                        self.arrival, freeable, cached_blocks, cached_free)


class RequestHandle:
    """What `add_request` returns: iterate for streamed outputs, or `result()`."""

    def __init__(self, abort: Callable[[str], None], request: LLMRequest) -> None:
        self._abort = abort  # the engine's, which owns the request
        self.request = request

    @property
    def request_id(self) -> str:
        return self.request.request_id

    def stream(self, timeout_s: float | None = None) -> Iterator[Output]:
        while True:
            out = self.request.outputs.get(timeout=timeout_s)
            yield out
            if out.finish_reason is not None:
                return

    def result(self, timeout_s: float | None = None) -> Output:
        return _joined(self.stream(timeout_s))

    async def astream(self, timeout_s: float | None = None) -> AsyncIterator[Output]:
        """`stream()` for an event loop: waits without holding a thread."""
        loop = asyncio.get_running_loop()
        ready = asyncio.Event()
        self.request.waker = lambda: loop.call_soon_threadsafe(ready.set)
        try:
            while True:
                try:
                    out = self.request.outputs.get_nowait()
                except queue.Empty:
                    ready.clear()
                    if self.request.outputs.empty():  # an output put since the check wakes the wait
                        await asyncio.wait_for(ready.wait(), timeout_s)
                    continue
                yield out
                if out.finish_reason is not None:
                    return
        finally:
            self.request.waker = None  # the waiter is gone (perhaps its loop with it)

    async def aresult(self, timeout_s: float | None = None) -> Output:
        return _joined([out async for out in self.astream(timeout_s)])

    def cancel(self) -> None:
        self._abort(self.request_id)


def _joined(outputs: Iterable[Output]) -> Output:
    text, ids, last = [], [], Output("", [])
    for last in outputs:
        text.append(last.text)
        ids += last.token_ids
    return Output("".join(text), ids, last.finish_reason, last.error)
