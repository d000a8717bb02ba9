"""The LLM engine: schedule -> execute -> update, one iteration at a time.

`schedule` (llm/scheduler.py) decides from counters and free blocks; `execute` builds
one flattened batch of every scheduled request's tokens and runs the model over the
paged KV cache (on a GPU by replaying a captured CUDA graph, llm/cuda_graphs.py);
`update` samples a token for every request whose computed tokens reached its end,
checks stop conditions, streams text, and frees the blocks of finished, aborted and
preempted requests.

Requests are added and aborted from any thread; `start()` runs the loop on its own
thread. When a vision engine shares the device (`vision=`), each step is one turn of
the vision schedule (`Engine.guest`): it runs in the slack vision deadlines leave,
and is owed `EngineConfig.min_share` of device time under full vision load, so captions
keep coming. The step cost it declares is the EWMA of its measured steps.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import AsyncIterator, Callable, Iterable, Iterator

import torch

from llm.cuda_graphs import StepGraphs
from llm.metrics import LLMMetrics
from llm.model import Batch, LlamaModel, SeqBatch, new_kv_cache
from llm.sampling import SamplingParams, sample
from llm.scheduler import SchedulerConfig, SeqState, schedule
from llm.tokenizer import Tokenizer

log = logging.getLogger("vigil.llm")
FIRST_STEP_MS = 10.0  # a step's cost before one is measured
STEP_COST_ALPHA = 0.2


class EngineFull(Exception):
    """`max_waiting` requests already wait: back-pressure, try again later."""


class BlockPool:
    """Fixed-size KV blocks; a free list. Every block is either free or held by exactly
    one request (a leak shows as `num_free < num_blocks` with nothing running)."""

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self._free = list(range(num_blocks - 1, -1, -1))

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self, n: int) -> list[int]:
        if n > len(self._free):
            raise RuntimeError(f"asked for {n} KV blocks with {len(self._free)} free")  # scheduler bug
        return [self._free.pop() for _ in range(n)]

    def free(self, blocks: list[int]) -> None:
        self._free.extend(reversed(blocks))


@dataclass(frozen=True)
class EngineConfig:
    num_blocks: int = 512
    block_size: int = 16
    max_num_seqs: int = 32
    max_step_tokens: int = 256
    request_level: bool = False  # ablation: a batch runs until its longest member ends
    cuda_graphs: bool = True  # on a GPU, steps replay captured CUDA graphs (llm/cuda_graphs.py)
    max_waiting: int | None = None  # requests that may wait to run; past it add_request raises EngineFull
    min_share: float = 0.1  # of device time owed to LLM steps when a vision engine shares the device

    def scheduler(self) -> SchedulerConfig:
        return SchedulerConfig(self.block_size, self.max_num_seqs, self.max_step_tokens, self.request_level)


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
    blocks: list[int] = field(default_factory=list)
    generator: torch.Generator | None = None
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

    def slot(self, position: int, block_size: int) -> int:
        """The KV cache slot of a position: its block's place in the pool, then its offset."""
        return self.blocks[position // block_size] * block_size + position % block_size

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    def state(self) -> SeqState:
        return SeqState(self.request_id, self.num_tokens, self.num_computed_tokens, len(self.blocks), self.priority,
                        self.arrival)


class RequestHandle:
    """What `add_request` returns: iterate for streamed outputs, or `result()`."""

    def __init__(self, engine: "LLMEngine", request: LLMRequest) -> None:
        self.engine = engine
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
        self.engine.abort(self.request_id)


def _joined(outputs: Iterable[Output]) -> Output:
    text, ids, last = [], [], Output("", [])
    for last in outputs:
        text.append(last.text)
        ids += last.token_ids
    return Output("".join(text), ids, last.finish_reason, last.error)


class LLMEngine:
    def __init__(self, model: LlamaModel, tokenizer: Tokenizer, config: EngineConfig | None = None,
                 name: str = "llm", clock: Callable[[], float] = time.monotonic, vision=None,
                 metrics: LLMMetrics | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.config = config or EngineConfig()
        self.name = name
        self.clock = clock
        self.vision = vision
        self.metrics = metrics or LLMMetrics()
        device = model.embed_tokens.weight.device
        # one block more than the pool hands out: scratch for the padding rows of a captured step
        self.kv = new_kv_cache(model.cfg, self.config.num_blocks + 1, self.config.block_size, str(device))
        self.pool = BlockPool(self.config.num_blocks)
        self.waiting: dict[str, LLMRequest] = {}
        self.running: dict[str, LLMRequest] = {}
        self._aborted: set[str] = set()
        self._ids = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closing = False
        self.num_steps = 0
        self.step_ms = FIRST_STEP_MS  # what a step costs (EWMA): its turn on a shared device
        max_context = self.config.num_blocks * self.config.block_size
        self.max_model_len = min(model.cfg.max_position_embeddings, max_context)
        self.graphs: StepGraphs | None = None
        if self.config.cuda_graphs and device.type == "cuda":
            try:
                self.use_step_graphs(capture=True)
            except RuntimeError as exc:  # slower without them, still right
                log.warning("LLM %s: CUDA graph capture failed (%s); steps run eagerly", name, exc)

    def use_step_graphs(self, capture: bool) -> None:
        """Run steps through the padded fixed-shape step (llm/cuda_graphs.py), captured
        as CUDA graphs when `capture`; uncaptured, the tests check its tokens on a CPU."""
        bs = self.config.block_size
        self.graphs = StepGraphs(self.model, self.kv, bs, -(-self.max_model_len // bs), self.config.max_step_tokens,
                                 scratch_block=self.config.num_blocks, capture=capture)

    # -- requests -----------------------------------------------------------------------------------
    def add_request(self, prompt: str | list[int], params: SamplingParams | None = None, priority: int = 0,
                    request_id: str | None = None, stream: bool = True) -> RequestHandle:
        """`stream=False`: the text comes in one piece when the request ends (no text is
        decoded token by token unless stop strings need it)."""
        params = params or SamplingParams()
        ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        if not ids:
            raise ValueError("prompt: empty; give at least one token")
        if len(ids) + params.max_tokens > self.max_model_len:
            raise ValueError(f"prompt ({len(ids)} tokens) + max_tokens ({params.max_tokens}) exceeds the model's "
                             f"context of {self.max_model_len} tokens")
        bad = [t for t in ids if not 0 <= t < self.model.cfg.vocab_size]
        if bad:
            raise ValueError(f"prompt: token ids {bad[:5]} are outside the vocabulary "
                             f"(0..{self.model.cfg.vocab_size - 1})")
        rid = request_id or f"{self.name}-{next(self._ids)}"
        req = LLMRequest(rid, ids, params, priority, self.clock(), stream=stream)
        if params.seed is not None:
            req.generator = torch.Generator(device=self.kv.device).manual_seed(params.seed)
        with self._cond:
            if self.config.max_waiting is not None and len(self.waiting) >= self.config.max_waiting:
                self.metrics.rejected.inc()
                raise EngineFull(f"{len(self.waiting)} LLM requests are waiting already (the most allowed); "
                                 "try again shortly")
            self.waiting[rid] = req
            self.metrics.prompt_tokens.inc(len(ids))
            self._cond.notify_all()
        return RequestHandle(self, req)

    def abort(self, request_id: str) -> None:
        with self._cond:
            self._aborted.add(request_id)
            self._cond.notify_all()

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # -- the loop -----------------------------------------------------------------------------------
    def start(self) -> "LLMEngine":
        self._thread = threading.Thread(target=self._loop, name=f"llm-{self.name}", daemon=True)
        self._thread.start()
        return self

    def close(self, timeout_s: float = 10.0) -> None:
        with self._cond:
            self._closing = True
            for rid in list(self.waiting) + list(self.running):
                self._aborted.add(rid)
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout_s)
        else:
            self._reap_aborted()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not (self._has_work() or self._closing):
                    self._cond.wait()
                if self._closing and not (self.waiting or self.running):
                    self._reap_aborted()
                    return
            try:
                self._steps_while_busy()
            except Exception as exc:
                log.exception("LLM step failed; failing the running requests")
                with self._cond:
                    for req in list(self.running.values()) + list(self.waiting.values()):
                        self._finish(req, "error", f"the engine step failed: {type(exc).__name__}: {exc}")

    def _has_work(self) -> bool:
        return bool(self.waiting or self.running or self._aborted)

    def _steps_while_busy(self) -> None:
        """Step until there is no work; on a device shared with vision, each step is a
        turn the vision schedule grants (`Engine.guest`)."""
        if self.vision is None:
            while self._busy():
                self.step()
            return
        with self.vision.guest(self.config.min_share) as device:
            while self._busy():
                with device.turn(self.step_ms):
                    started = time.perf_counter()
                    self.step()
                    elapsed_ms = (time.perf_counter() - started) * 1000.0
                self.step_ms = STEP_COST_ALPHA * elapsed_ms + (1 - STEP_COST_ALPHA) * self.step_ms

    def _busy(self) -> bool:
        with self._cond:
            return self._has_work() and not (self._closing and not (self.waiting or self.running))

    def step(self) -> list[LLMRequest]:
        """One iteration; returns the requests that finished in it."""
        with self._cond:
            self._reap_aborted()
            plan = schedule([r.state() for r in self.running.values()], [r.state() for r in self.waiting.values()],
                            self.pool.num_free, self.config.scheduler())
            for rid in plan.preempted:
                self._preempt(self.running.pop(rid))
            for rid in plan.admitted:
                self.running[rid] = self.waiting.pop(rid)
            for rid, n in plan.new_blocks.items():
                req = self.running[rid]
                req.blocks += self.pool.allocate(n)
            scheduled = [(self.running[rid], n) for rid, n in plan.scheduled.items()]
            self._report()
        if not scheduled:
            return []
        logits = self._execute(scheduled)
        with self._cond:
            finished = self._update(scheduled, logits)
            self.num_steps += 1
            self._report()
        return finished

    def _execute(self, scheduled: list[tuple[LLMRequest, int]]) -> torch.Tensor:
        bs = self.config.block_size
        if self.graphs is not None and sum(n for _, n in scheduled) <= self.graphs.max_tokens:
            rows, last = [], []
            for req, n in scheduled:  # a row per token: (token, position, slot, context length, block table...)
                for p, token in enumerate(req.token_ids(req.num_computed_tokens, n), req.num_computed_tokens):
                    rows.append([token, p, req.slot(p, bs), p + 1, *req.blocks])
                last.append(len(rows) - 1)
            logits = self.graphs.run(rows)
            return logits if len(last) == len(rows) else logits[torch.tensor(last, device=logits.device)]
        tokens, positions, slots, seqs = [], [], [], []
        for req, n in scheduled:
            start = req.num_computed_tokens
            seqs.append(SeqBatch(len(tokens), n, start + n, list(req.blocks)))
            tokens += req.token_ids(start, n)
            for p in range(start, start + n):
                positions.append(p)
                slots.append(req.slot(p, bs))
        device = self.kv.device
        batch = Batch(torch.tensor(tokens, device=device), torch.tensor(positions, device=device), seqs,
                      torch.tensor(slots, device=device), bs)
        return self.model(batch, self.kv)

    def _update(self, scheduled: list[tuple[LLMRequest, int]], logits: torch.Tensor) -> list[LLMRequest]:
        finished = []
        now = self.clock()
        greedy = logits.argmax(dim=-1).tolist()  # one call for the whole batch, not one per request
        generated = 0
        for k, ((req, n), best) in enumerate(zip(scheduled, greedy)):
            req.num_computed_tokens += n
            if req.request_id in self._aborted or req.num_computed_tokens < req.num_tokens:
                continue  # a prefill chunk: no token yet
            try:
                token = best if req.params.greedy else sample(logits[k], req.params, req.generator)
            except (ValueError, RuntimeError) as exc:  # this request's sampling alone: the batch goes on
                log.warning("LLM request %s failed in sampling: %s", req.request_id, exc)
                self._finish(req, "error", str(exc))
                finished.append(req)
                continue
            req.output_ids.append(token)
            generated += 1
            if req.first_token_s is None:
                req.first_token_s = now
                self.metrics.ttft.observe(now - req.arrival)
            else:
                self.metrics.itl.observe(now - req.last_token_s)
            req.last_token_s = now
            reason = self._check_stop(req, token)
            if reason is not None:
                self._finish(req, reason)
                finished.append(req)
            elif req.stream:
                self._stream(req)
        self.metrics.generation_tokens.inc(generated)
        return finished

    def _check_stop(self, req: LLMRequest, token: int) -> str | None:
        p = req.params
        seen = len(req.text)
        if req.stream or p.stop:  # the text as it grows: pieces to stream, stop strings to find
            self._detokenize(req)  # (two decodes and a queued piece a token: 180 of the 295 us
            # a 32-request step spent here on a 2-core CPU, where a graphed GPU step is ~1 ms)
        if not p.ignore_eos and token in self.tokenizer.eos_ids:
            req.output_ids.pop()  # the end marker is not part of the answer
            req.text = self.tokenizer.decode(req.output_ids)
            return "stop"
        for s in p.stop:
            cut = req.text.find(s, max(0, seen - len(s) + 1))  # one ending in the new text
            if cut >= 0:
                req.text = req.text[:cut]
                return "stop"
        if len(req.output_ids) >= p.max_tokens:
            req.text = self.tokenizer.decode(req.output_ids)  # with any character still incomplete
            return "length"
        return None

    def _detokenize(self, req: LLMRequest) -> None:
        """Appends the new token's text, decoding only the tokens since the last piece
        (decoding the whole output at every token is quadratic in its length). The
        previous piece's tokens are decoded with it, so a decoder that depends on the
        token before (a word-start marker, a multi-byte character) comes out the same as
        decoding everything; a trailing incomplete character waits for the next token."""
        ids = req.output_ids
        before = self.tokenizer.decode(ids[req.prefix_offset:req.read_offset])
        after = self.tokenizer.decode(ids[req.prefix_offset:])
        if len(after) > len(before) and not after.endswith("\ufffd"):
            req.text += after[len(before):]
            req.prefix_offset, req.read_offset = req.read_offset, len(ids)

    def _stream(self, req: LLMRequest, final: str | None = None) -> None:
        # hold back text that could be the start of a stop string
        hold = 0 if final else max((len(s) - 1 for s in req.params.stop), default=0)
        upto = max(req.sent, len(req.text) - hold)
        if final is None and upto <= req.sent:
            return
        piece = req.text[req.sent:upto]
        req.sent = upto
        req.outputs.put(Output(piece, [], final, req.error if final else None))
        if req.waker is not None:
            req.waker()

    def _finish(self, req: LLMRequest, reason: str, error: str | None = None) -> None:
        req.finish_reason = reason
        req.error = error
        self.running.pop(req.request_id, None)
        self.waiting.pop(req.request_id, None)
        self.pool.free(req.blocks)
        req.blocks = []
        self._stream(req, final=reason)
        self.metrics.finished(reason, self.clock() - req.arrival, len(req.prompt_ids), len(req.output_ids))

    def _preempt(self, req: LLMRequest) -> None:
        """Recompute later: give back the blocks, forget the computed tokens (the
        generated ones stay and are part of the prompt when it runs again)."""
        self.pool.free(req.blocks)
        req.blocks = []
        req.num_computed_tokens = 0
        req.num_preemptions += 1
        self.metrics.preemptions.inc()
        self.waiting[req.request_id] = req

    def _reap_aborted(self) -> None:
        for rid in list(self._aborted):
            req = self.running.get(rid) or self.waiting.get(rid)
            if req is not None:
                self._finish(req, "abort")
        self._aborted.clear()

    def _report(self) -> None:
        self.metrics.running.set(len(self.running))
        self.metrics.waiting.set(len(self.waiting))
        self.metrics.kv_usage.set(1.0 - self.pool.num_free / self.pool.num_blocks)
