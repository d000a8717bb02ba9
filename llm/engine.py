"""The LLM engine: schedule -> execute -> update, one iteration at a time.

`schedule` (llm/scheduler.py) decides from counters and free blocks, and the engine
carries the plan out on the paged KV cache (llm/kv_cache.py); `execute` flattens every
scheduled request's tokens into one step's inputs (`prepare_inputs`) and runs the model
over the cache, eagerly or through the padded fixed-shape step that a GPU replays as a
captured CUDA graph (llm/cuda_graphs.py); `update` samples a token for every request
whose computed tokens reached its end, checks stop conditions and streams text
(llm/detokenize.py), and frees the blocks of finished, aborted and preempted requests.
Request state and the caller's handle are in llm/requests.py.

Requests are added and aborted from any thread; `start()` runs the loop on its own
thread. When a vision engine shares the device (`arbiter=`, its engine/arbiter.py
`DeviceArbiter`), each step is one turn the arbiter grants: it runs in the slack vision deadlines leave,
and is owed `EngineConfig.min_share` of device time under full vision load, so captions
keep coming. The step cost it declares is the EWMA of its measured steps.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable

import torch

from llm.cuda_graphs import StepGraphs
from llm.detokenize import check_stop, stream_text
from llm.kv_cache import BlockPool, blocks_for, new_kv_cache, prepare_inputs
from llm.metrics import LLMMetrics
from llm.model import LlamaModel
from llm.requests import LLMRequest, RequestHandle
from llm.sampling import SamplingParams, sample
from llm.scheduler import SchedulerConfig, schedule
from llm.tokenizer import Tokenizer

log = logging.getLogger("vigil.llm")
FIRST_STEP_MS = 10.0  # a step's cost before one is measured
STEP_COST_ALPHA = 0.2


class EngineFull(Exception):
    """`max_waiting` requests already wait: back-pressure, try again later."""


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


class LLMEngine:
    def __init__(self, model: LlamaModel, tokenizer: Tokenizer, config: EngineConfig | None = None,
                 name: str = "llm", clock: Callable[[], float] = time.monotonic, arbiter=None,
                 metrics: LLMMetrics | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.config = config or EngineConfig()
        self.name = name
        self.clock = clock
        self.arbiter = arbiter  # engine.arbiter.DeviceArbiter of a shared device, or None
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
        self.graphs = StepGraphs(self.model, self.kv, bs, blocks_for(self.max_model_len, bs),
                                 self.config.max_step_tokens, scratch_block=self.config.num_blocks, capture=capture)

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
        turn the device arbiter grants."""
        if self.arbiter is None:
            while self._busy():
                self.step()
            return
        with self.arbiter.guest(self.config.min_share) as device:
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
        """One iteration: schedule -> execute -> update; returns the requests that
        finished in it. The model runs outside the lock: requests are added and aborted
        meanwhile, and take effect at the next step."""
        with self._cond:
            scheduled = self._schedule()
        if not scheduled:
            return []
        logits = self._execute(scheduled)
        with self._cond:
            finished = self._update(scheduled, logits)
            self.num_steps += 1
            self._report()
        return finished

    def _schedule(self) -> list[tuple[LLMRequest, int]]:
        """Decides this step (llm/scheduler.py) and carries the plan out: preempts,
        admits, allocates blocks. Returns (request, tokens it computes) in plan order."""
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
        self._report()
        return [(self.running[rid], n) for rid, n in plan.scheduled.items()]

    def _execute(self, scheduled: list[tuple[LLMRequest, int]]) -> torch.Tensor:
        """The logits of each scheduled request's last token this step: [len(scheduled), vocab]."""
        inputs = prepare_inputs(scheduled, self.config.block_size)
        if self.graphs is not None and inputs.num_tokens <= self.graphs.max_tokens:
            return self.graphs.run(inputs)
        return self.model(inputs.batch(self.config.block_size, self.kv.device), self.kv)

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
            reason = check_stop(req, token, self.tokenizer)
            if reason is not None:
                self._finish(req, reason)
                finished.append(req)
            elif req.stream:
                stream_text(req)
        self.metrics.generation_tokens.inc(generated)
        return finished

    def _finish(self, req: LLMRequest, reason: str, error: str | None = None) -> None:
        req.finish_reason = reason
        req.error = error
        self.running.pop(req.request_id, None)
        self.waiting.pop(req.request_id, None)
        self.pool.free(req.blocks)
        req.blocks = []
        stream_text(req, final=reason)
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
