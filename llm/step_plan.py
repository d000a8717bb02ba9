"""The LLM scheduler's plan for a step: a pure function of request counters and free
KV blocks (llm/scheduler.py carries it out).

Iteration-level (Orca): every step it decides afresh which requests run and how many
tokens each computes, so requests join and leave the batch at every step. A request
knows `num_tokens` (prompt + generated) and `num_computed_tokens`; whether it is in
prefill or decode follows from them. Each step has a token budget; a prompt longer than
what is left is prefilled in chunks (chunked prefill), so long prompts never stall
the decodes running beside them.

KV memory is paged (vLLM): a request holds `ceil(computed / block_size)` blocks. When a
running request needs a block and none is free, the running request of lowest
priority and latest arrival is preempted (its blocks are freed and it is recomputed
from scratch later; possibly the request itself). Waiting requests are admitted in
order of priority then arrival, only when their next chunk's blocks are free. A waiting
request whose prompt begins with blocks in the prefix cache (llm/block_pool.py) starts on
them, and computes only the rest.

`request_level=True` is the ablation: nothing new is admitted while any request runs
(a batch runs until its longest member ends), as request-level serving does.
"""

from __future__ import annotations

from dataclasses import dataclass, field


def blocks_for(num_tokens: int, block_size: int) -> int:
    """Blocks that hold `num_tokens` positions."""
    return -(-num_tokens // block_size)


@dataclass(frozen=True)
class SchedulerConfig:
    block_size: int = 16
    max_num_seqs: int = 32  # running requests at most
    max_step_tokens: int = 256  # token budget per step (prefill chunks + decodes)
    request_level: bool = False

    def __post_init__(self) -> None:
        for name in ("block_size", "max_num_seqs", "max_step_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1; was {getattr(self, name)}")


@dataclass(frozen=True)
class SeqState:
    request_id: str
    num_tokens: int  # prompt + generated so far
    num_computed_tokens: int
    num_blocks: int  # KV blocks held
    priority: int = 0  # higher runs first
    arrival: float = 0.0
    freeable: int | None = None  # running: blocks its preemption would free (none shared); None: all it holds
    cached_blocks: int = 0  # waiting: its prefix's blocks in the prefix cache, taken when it is admitted
    cached_free: int = 0  # of those, the ones on the free list (taking them uses up free blocks)


@dataclass
class StepPlan:
    scheduled: dict[str, int] = field(default_factory=dict)  # request -> tokens to compute this step
    new_blocks: dict[str, int] = field(default_factory=dict)  # request -> blocks to allocate first
    preempted: list[str] = field(default_factory=list)  # running requests to free and recompute later
    admitted: list[str] = field(default_factory=list)  # waiting requests that start running
    hits: dict[str, int] = field(default_factory=dict)  # admitted request -> cached prefix blocks it starts on

    @property
    def num_tokens(self) -> int:
        return sum(self.scheduled.values())


def _rank(s: SeqState) -> tuple:
    return (-s.priority, s.arrival, s.request_id)


def schedule(running: list[SeqState], waiting: list[SeqState], num_free_blocks: int,
             cfg: SchedulerConfig) -> StepPlan:
    plan = StepPlan()
    budget = cfg.max_step_tokens
    free = num_free_blocks
    # Most important first; victims are taken from the back (lowest priority, latest arrival).
    queue = sorted(running, key=_rank)
    kept: list[SeqState] = []
    while queue:
        s = queue.pop(0)
        if budget <= 0:
            kept.append(s)
            continue
        n = min(s.num_tokens - s.num_computed_tokens, budget)
        if n <= 0:
            kept.append(s)
            continue
        need = blocks_for(s.num_computed_tokens + n, cfg.block_size) - s.num_blocks
        while need > free and queue:  # free the least important running request
            victim = queue.pop()
            plan.preempted.append(victim.request_id)
            free += victim.num_blocks if victim.freeable is None else victim.freeable
        if need > free:  # nothing left to take: this request itself waits its turn again
            plan.preempted.append(s.request_id)
            free += s.num_blocks if s.freeable is None else s.freeable
            continue
        free -= max(0, need)
        if need > 0:
            plan.new_blocks[s.request_id] = need
        plan.scheduled[s.request_id] = n
        budget -= n
        kept.append(s)
    num_running = len(kept)
    if cfg.request_level and (num_running > 0 or plan.preempted):
        return plan
    for s in sorted(waiting, key=_rank):
        if num_running >= cfg.max_num_seqs or (budget <= 0 and not cfg.request_level):
            break
        # A prefix found in the cache counts as computed. Not in a step that preempts: the
        # blocks it frees change which cached blocks are free.
        hit = 0 if plan.preempted else s.cached_blocks
        start = s.num_computed_tokens + hit * cfg.block_size
        # request-level admits the whole batch at once; prompts beyond this step's
        # budget are prefilled in the next steps
        n = min(s.num_tokens - start, max(budget, 0))
        need = blocks_for(start + n, cfg.block_size) - s.num_blocks - hit
        cost = need + (s.cached_free if hit else 0)
        if cost > free:
            break  # in order: a later request must not overtake one that waits for memory
        free -= cost
        if need > 0:
            plan.new_blocks[s.request_id] = need
        if hit:
            plan.hits[s.request_id] = hit
        if n > 0:
            plan.scheduled[s.request_id] = n
        plan.admitted.append(s.request_id)
        budget -= n
        num_running += 1
    return plan
