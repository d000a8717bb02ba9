"""The LLM engine: schedule -> execute -> update_from_output, one iteration at a time.

The scheduler (llm/scheduler.py) owns the requests and their blocks of the paged KV
cache (llm/kv_cache.py): it plans and carries out each step, and takes its output back.
The engine executes: it flattens every scheduled request's tokens into one step's
inputs (`prepare_inputs`), runs the model over the cache, eagerly or through the padded
fixed-shape step that a GPU replays as a captured CUDA graph (llm/cuda_graphs.py), and
samples a token for every request whose computed tokens reach its end. Request state
and the caller's handle are in llm/requests.py.

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

from llm.adapters import AdapterError, AdapterSet
from llm.cuda_graphs import StepGraphs
from llm.kv_cache import KVCacheManager, new_kv_cache, prepare_inputs
from llm.metrics import LLMMetrics
from llm.model import LlamaModel, LoraStep
from llm.requests import LLMRequest, RequestHandle
from llm.sampling import SamplingParams, sample
from llm.scheduler import Sampled, Scheduler
from llm.step_plan import SchedulerConfig, blocks_for
from llm.structured import Grammars, Unsatisfiable
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
    prefix_caching: bool = True  # full blocks of K/V are kept by their prefix and reused (llm/block_pool.py)
    max_loras: int = 8  # LoRA adapters held at once (llm/adapters.py)
    max_lora_rank: int = 64
    jump_forward: bool = True  # a structured output's forced tokens join without a pass each (llm/structured.py)

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
        self.metrics = metrics or LLMMetrics(model=name)
        device = model.embed_tokens.weight.device
        self.adapters = AdapterSet(model.cfg, device, self.config.max_loras, self.config.max_lora_rank)
        self.grammars = Grammars(tokenizer, model.cfg.vocab_size)
        self._bitmask: torch.Tensor | None = None  # token masks of a step's constrained rows, allocated once
        # one block more than the pool hands out: scratch for the padding rows of a captured step
        self.kv = new_kv_cache(model.cfg, self.config.num_blocks + 1, self.config.block_size, str(device))
        self.scheduler = Scheduler(self.config.scheduler(), KVCacheManager(self.config.num_blocks,
                                                                          self.config.block_size,
                                                                          self.config.prefix_caching),
                                   tokenizer, self.metrics, clock, self.config.jump_forward)
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
                    request_id: str | None = None, stream: bool = True, lora: str | None = None) -> RequestHandle:
        """`stream=False`: the text comes in one piece when the request ends (no text is
        decoded token by token unless stop strings need it). `lora`: the loaded adapter
        it runs with (None: the base model). A structured output's grammar is compiled
        here, on the caller's thread (ConstraintError when it cannot be)."""
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
        req = LLMRequest(rid, ids, params, priority, self.clock(), stream=stream, lora=lora)
        if params.constraint is not None:
            req.grammar = self.grammars.state(params.constraint)
            if self.config.jump_forward:  # what the grammar forces first is computed with the prompt
                req.output_ids = req.grammar.forced(self.tokenizer, params.max_tokens - 1)
                req.num_forced = len(req.output_ids)
        if params.seed is not None:
            req.generator = torch.Generator(device=self.kv.device).manual_seed(params.seed)
        with self._cond:
            waiting = len(self.scheduler.waiting)
            if self.config.max_waiting is not None and waiting >= self.config.max_waiting:
                self.metrics.rejected.inc()
                raise EngineFull(f"{waiting} LLM requests are waiting already (the most allowed); "
                                 "try again shortly")
            if lora is not None:
                if lora not in self.adapters.loaded:  # unloaded meanwhile
                    raise AdapterError(f"no adapter {lora!r} on {self.name}; loaded: {sorted(self.adapters.loaded)}")
                req.cache_salt = self.adapters.salts[lora]
            self.scheduler.add_request(req)
            self.metrics.prompt_tokens.inc(len(ids))
            self._cond.notify_all()
        return RequestHandle(self.abort, req)

    def abort(self, request_id: str) -> None:
        with self._cond:
            self.scheduler.abort(request_id)
            self._cond.notify_all()

    # -- adapters -----------------------------------------------------------------------------------
    def load_lora(self, name: str, folder) -> None:
        """Serve the LoRA adapter at `folder` as `name` (AdapterError or CheckpointError
        say why not); it is read outside the lock, so steps go on meanwhile."""
        adapter = self.adapters.read(name, folder)
        with self._cond:
            self.adapters.add(adapter)

    def unload_lora(self, name: str) -> None:
        """Stop serving adapter `name`; refused while requests use it."""
        with self._cond:
            using = [r for r in (*self.scheduler.waiting.values(), *self.scheduler.running.values()) if r.lora == name]
            if using:
                raise AdapterError(f"adapter {name!r} is in use by {len(using)} requests; unload it when they end")
            self.adapters.remove(name)

    def has_work(self) -> bool:
        with self._cond:
            return self.scheduler.has_unfinished()

    # -- the loop -----------------------------------------------------------------------------------
    def start(self) -> "LLMEngine":
        self._thread = threading.Thread(target=self._loop, name=f"llm-{self.name}", daemon=True)
        self._thread.start()
        return self

    def close(self, timeout_s: float = 10.0) -> None:
        with self._cond:
            self._closing = True
            self.scheduler.abort_all()
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout_s)
        else:
            with self._cond:
                self.scheduler.reap_aborted()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not (self.scheduler.has_work() or self._closing):
                    self._cond.wait()
                if self._closing and not self.scheduler.has_unfinished():
                    self.scheduler.reap_aborted()
                    return
            try:
                self._steps_while_busy()
            except Exception as exc:
                log.exception("LLM step failed; failing the running requests")
                with self._cond:
                    self.scheduler.fail_all(f"the engine step failed: {type(exc).__name__}: {exc}")

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
            return self.scheduler.has_work() and not (self._closing and not self.scheduler.has_unfinished())

    def step(self) -> list[LLMRequest]:
        """One iteration: schedule -> execute -> update_from_output; returns the requests
        that finished in it. The model runs outside the lock: requests are added and
        aborted meanwhile, and take effect at the next step."""
        with self._cond:
            scheduled = self.scheduler.schedule()
            lora = self.adapters.step([(req.lora, n) for req, n in scheduled]) if scheduled else None
        if not scheduled:
            return []
        logits = self._execute(scheduled, lora)
        with self._cond:
            finished = self.scheduler.update_from_output(scheduled, self._sample(scheduled, logits))
            self.num_steps += 1
        return finished

    def _execute(self, scheduled: list[tuple[LLMRequest, int]], lora: LoraStep | None) -> torch.Tensor:
        """The logits of each scheduled request's last token this step: [len(scheduled), vocab]."""
        inputs = prepare_inputs(scheduled, self.config.block_size)
        if self.graphs is not None and lora is None and inputs.num_tokens <= self.graphs.max_tokens:
            return self.graphs.run(inputs)
        batch = inputs.batch(self.config.block_size, self.kv.device)
        batch.lora = lora
        return self.model(batch, self.kv)

    def _sample(self, scheduled: list[tuple[LLMRequest, int]], logits: torch.Tensor) -> list[Sampled]:
        """Each scheduled request's next token where this step reaches its end; None for
        a prefill chunk; the error where its sampling failed (that request alone)."""
        failed: dict[int, Exception] = {}
        self._mask_constrained(scheduled, logits, failed)
        greedy = logits.argmax(dim=-1).tolist()  # one call for the whole batch, not one per request
        out: list[Sampled] = []
        for k, ((req, n), best) in enumerate(zip(scheduled, greedy)):
            if not self.scheduler.completes(req, n):
                out.append(None)
                continue
            if k in failed:
                out.append(failed[k])
                continue
            try:
                out.append(best if req.params.greedy else sample(logits[k], req.params, req.generator))
            except (ValueError, RuntimeError) as exc:
                log.warning("LLM request %s failed in sampling: %s", req.request_id, exc)
                out.append(exc)
        return out

    def _mask_constrained(self, scheduled: list[tuple[LLMRequest, int]], logits: torch.Tensor,
                          failed: dict[int, Exception]) -> None:
        """Forbid, in each constrained request's row that samples this step, the tokens its
        grammar does not allow; the other rows are not touched. A row whose grammar allows
        no token goes into `failed`."""
        rows = [k for k, (req, n) in enumerate(scheduled)
                if req.grammar is not None and self.scheduler.completes(req, n)]
        if not rows:
            return
        import xgrammar as xgr

        if self._bitmask is None:
            self._bitmask = self.grammars.bitmask(self.config.max_num_seqs)
        mask = self._bitmask[:len(scheduled)]
        masked = []
        for k in rows:
            try:
                scheduled[k][0].grammar.fill(mask, k)
                masked.append(k)
            except Unsatisfiable as exc:
                failed[k] = exc
        if masked:
            xgr.apply_token_bitmask_inplace(logits, mask.to(logits.device, non_blocking=True), indices=masked)
