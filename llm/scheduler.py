"""The LLM scheduler: the owner of the waiting and running requests and, through the KV
cache manager, of their blocks, as vLLM v1's.

Each step `schedule` plans (llm/step_plan.py, a pure function of counters and free
blocks) and carries the plan out: preempts, admits and allocates. Once the model has
run, `update_from_output` takes the step's sampled tokens back: it advances each
request's computed tokens, appends its token, checks stop conditions, streams text
(llm/detokenize.py) and frees what finished. The engine (llm/engine.py) runs schedule
-> execute -> update_from_output and keeps no request state of its own.

Not locked by itself: the engine calls it under its lock, from the threads that add and
abort requests and from its loop.
"""

from __future__ import annotations

from typing import Callable, Union

from llm.detokenize import check_stop, stream_text
from llm.kv_cache import KVCacheManager
from llm.metrics import LLMMetrics
from llm.requests import LLMRequest
from llm.step_plan import SchedulerConfig, schedule
from llm.structured import UNSATISFIABLE, Unsatisfiable
from llm.tokenizer import Tokenizer

# a scheduled request's outcome of a step: its sampled token, None for a prefill chunk
# (no token yet), or the error its sampling raised (that request fails, the batch goes on)
Sampled = Union[int, None, Exception]


class Scheduler:
    def __init__(self, config: SchedulerConfig, kv_cache: KVCacheManager, tokenizer: Tokenizer,
                 metrics: LLMMetrics, clock: Callable[[], float], jump_forward: bool = True) -> None:
        self.config = config
        self.jump_forward = jump_forward  # structured outputs: forced tokens join without a pass each
        self.kv_cache = kv_cache
        self.tokenizer = tokenizer
        self.metrics = metrics
        self.clock = clock
        self.waiting: dict[str, LLMRequest] = {}
        self.running: dict[str, LLMRequest] = {}
        self._aborted: set[str] = set()

    # -- requests -----------------------------------------------------------------------------------
    def add_request(self, request: LLMRequest) -> None:
        self.waiting[request.request_id] = request

    def abort(self, request_id: str) -> None:
        """Ends the request at the start of the next step (or now, in `reap_aborted`)."""
        self._aborted.add(request_id)

    def abort_all(self) -> None:
        self._aborted.update(self.waiting)
        self._aborted.update(self.running)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self._aborted)

    # -- a step -------------------------------------------------------------------------------------
    def schedule(self) -> list[tuple[LLMRequest, int]]:
        """This step's (request, tokens it computes), in plan order, with the plan's
        preemptions, admissions and blocks carried out."""
        self.reap_aborted()
        found = {rid: self.kv_cache.lookup(r) for rid, r in self.waiting.items()}
        plan = schedule([r.state(self.kv_cache.freeable(r)) for r in self.running.values()],
                        [r.state(None, len(found[rid][0]), found[rid][1]) for rid, r in self.waiting.items()],
                        self.kv_cache.num_free, self.config)
        for rid in plan.preempted:
            self._preempt(self.running.pop(rid))
        for rid in plan.admitted:  # cached blocks are taken before any is handed out
            req = self.running[rid] = self.waiting.pop(rid)
            hit = plan.hits.get(rid, 0)
            if hit:
                self.kv_cache.attach(req, found[rid][0][:hit])
            self.metrics.prefix_cached(req.num_tokens, hit * self.config.block_size)
        for rid, n in plan.new_blocks.items():
            self.kv_cache.allocate_slots(self.running[rid], n)
        self.report()
        return [(self.running[rid], n) for rid, n in plan.scheduled.items()]

    def update_from_output(self, scheduled: list[tuple[LLMRequest, int]], sampled: list[Sampled]) -> list[LLMRequest]:
        """Takes the step back; returns the requests that finished in it."""
        finished = []
        now = self.clock()
        generated = 0
        for (req, n), token in zip(scheduled, sampled):
            req.num_computed_tokens += n
            self.kv_cache.cache_full_blocks(req)
            if token is None or req.request_id in self._aborted:
                continue
            if isinstance(token, Exception):
                self.finish(req, UNSATISFIABLE if isinstance(token, Unsatisfiable) else "error", str(token))
                finished.append(req)
                continue
            req.output_ids.append(token)
            generated += 1
            if req.grammar is not None and not req.grammar.accept(token):
                self.finish(req, "error", f"token {token} is outside the structured output's grammar")
                finished.append(req)
                continue
            if req.first_token_s is None:
                req.first_token_s = now
                self.metrics.ttft.observe(now - req.arrival)
            else:
                self.metrics.itl.observe(now - req.last_token_s)
            req.last_token_s = now
            reason = check_stop(req, token, self.tokenizer)
            if reason is None and req.grammar is not None:
                try:
                    reason, forced = self._jump_forward(req)
                except Exception as exc:  # the grammar backend failed this request: it fails alone
                    self.finish(req, "error", f"structured output: {type(exc).__name__}: {exc}")
                    finished.append(req)
                    continue
                generated += forced
            if reason is not None:
                self.finish(req, reason)
                finished.append(req)
            elif req.stream:
                stream_text(req)
        self.metrics.generation_tokens.inc(generated)
        self.report()
        return finished

    def _jump_forward(self, req: LLMRequest) -> tuple[str | None, int]:
        """Appends what the request's grammar forces next (llm/structured.py); (the finish
        reason if it ends the request, the tokens appended)."""
        if req.grammar.terminated:  # a grammar that ends without a stop token
            req.text = self.tokenizer.decode(req.output_ids)
            return "stop", 0
        if not self.jump_forward:
            return None, 0
        forced = req.grammar.forced(self.tokenizer, req.params.max_tokens - len(req.output_ids))
        for k, token in enumerate(forced):
            req.output_ids.append(token)
            req.num_forced += 1
            reason = check_stop(req, token, self.tokenizer)
            if reason is not None:
                return reason, k + 1
        return None, len(forced)

    def completes(self, req: LLMRequest, n: int) -> bool:
        """Whether computing `n` more tokens reaches the request's end, so that the step
        samples its next token (otherwise it was a prefill chunk)."""
        return req.request_id not in self._aborted and req.num_computed_tokens + n >= req.num_tokens

    # -- endings --------------------------------------------------------------------------------------
    def finish(self, req: LLMRequest, reason: str, error: str | None = None) -> None:
        req.finish_reason = reason
        req.error = error
        self.running.pop(req.request_id, None)
        self.waiting.pop(req.request_id, None)
        self.kv_cache.free(req)
        stream_text(req, final=reason)
        self.metrics.finished(reason, self.clock() - req.arrival, len(req.prompt_ids), len(req.output_ids))

    def fail_all(self, error: str) -> None:
        for req in list(self.running.values()) + list(self.waiting.values()):
            self.finish(req, "error", error)

    def reap_aborted(self) -> None:
        for rid in list(self._aborted):
            req = self.running.get(rid) or self.waiting.get(rid)
            if req is not None:
                self.finish(req, "abort")
        self._aborted.clear()

    def _preempt(self, req: LLMRequest) -> None:
        """Recompute later: give back the blocks, forget the computed tokens (the
        generated ones stay and are part of the prompt when it runs again)."""
        self.kv_cache.free(req)
        req.num_computed_tokens = 0
        req.num_preemptions += 1
        self.metrics.preemptions.inc()
        self.waiting[req.request_id] = req

    def report(self) -> None:
        self.metrics.running.set(len(self.running))
        self.metrics.waiting.set(len(self.waiting))
        self.metrics.kv_usage.set(self.kv_cache.usage)
