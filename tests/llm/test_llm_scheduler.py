"""The LLM scheduler as a pure function: counters and free blocks in, a plan out."""

from __future__ import annotations

import pytest

from llm.step_plan import SchedulerConfig, SeqState, schedule


def seq(rid, num_tokens, computed=0, blocks=None, priority=0, arrival=0.0, block_size=4):
    held = -(-computed // block_size) if blocks is None else blocks
    return SeqState(rid, num_tokens, computed, held, priority, arrival)


CFG = SchedulerConfig(block_size=4, max_num_seqs=8, max_step_tokens=16)


def test_decodes_and_new_prefills_share_a_step():
    running = [seq("a", 10, 9), seq("b", 6, 5)]
    waiting = [seq("c", 7, arrival=1.0)]
    plan = schedule(running, waiting, num_free_blocks=10, cfg=CFG)
    assert plan.scheduled == {"a": 1, "b": 1, "c": 7}
    assert plan.admitted == ["c"] and plan.new_blocks == {"c": 2}


def test_a_long_prompt_is_prefilled_in_chunks_under_the_budget():
    plan = schedule([seq("d", 3, 2)], [seq("p", 40)], num_free_blocks=20, cfg=CFG)
    assert plan.scheduled == {"d": 1, "p": 15}  # 16-token budget: one decode + a 15-token chunk
    plan = schedule([seq("d", 3, 2), seq("p", 40, 15)], [], num_free_blocks=20, cfg=CFG)
    assert plan.scheduled == {"d": 1, "p": 15}


def test_priority_then_arrival_orders_admission():
    waiting = [seq("late", 4, arrival=2.0), seq("early", 4, arrival=1.0), seq("urgent", 4, priority=5, arrival=3.0)]
    plan = schedule([], waiting, num_free_blocks=2, cfg=CFG)
    assert plan.admitted == ["urgent", "early"]  # memory for two; the late one waits


def test_waiting_requests_do_not_overtake_one_blocked_on_memory():
    waiting = [seq("big", 16, arrival=1.0), seq("small", 2, arrival=2.0)]
    plan = schedule([], waiting, num_free_blocks=2, cfg=CFG)
    assert plan.admitted == []


def test_out_of_blocks_preempts_lowest_priority_latest_arrival():
    running = [seq("old", 9, 8, priority=1, arrival=0.0), seq("new", 9, 8, arrival=2.0), seq("mid", 9, 8, arrival=1.0)]
    plan = schedule(running, [], num_free_blocks=0, cfg=CFG)  # each needs a third block
    assert plan.preempted == ["new"]  # its two blocks feed "old" and "mid"
    assert plan.scheduled == {"old": 1, "mid": 1}


def test_a_request_that_cannot_fit_preempts_itself():
    plan = schedule([seq("only", 9, 8)], [], num_free_blocks=0, cfg=CFG)
    assert plan.preempted == ["only"] and plan.scheduled == {}


def test_preempting_a_request_frees_only_the_blocks_it_holds_alone():
    shared = SeqState("shares", 9, 8, 2, 0, 2.0, freeable=0)  # both its blocks are a cached prefix another holds
    plan = schedule([seq("a", 9, 8, arrival=0.0), shared], [], num_free_blocks=0, cfg=CFG)
    assert plan.preempted == ["shares", "a"] and plan.scheduled == {}  # nothing came free: "a" waits too


def test_a_cached_prefix_counts_as_computed_and_costs_only_its_free_blocks():
    waiting = [SeqState("w", 10, 0, 0, cached_blocks=2, cached_free=1)]  # 8 of 10 tokens cached
    plan = schedule([], waiting, num_free_blocks=2, cfg=CFG)
    assert plan.hits == {"w": 2} and plan.scheduled == {"w": 2} and plan.new_blocks == {"w": 1}
    plan = schedule([], waiting, num_free_blocks=1, cfg=CFG)  # one for its third block, one to take back
    assert plan.admitted == []
    plan = schedule([seq("r", 9, 8)], waiting, num_free_blocks=0, cfg=CFG)  # a step that preempts uses no hits
    assert plan.preempted == ["r"] and plan.hits == {}


def test_request_level_admits_nothing_while_a_batch_runs():
    cfg = SchedulerConfig(block_size=4, max_num_seqs=8, max_step_tokens=16, request_level=True)
    plan = schedule([seq("a", 10, 9)], [seq("b", 3)], num_free_blocks=10, cfg=cfg)
    assert plan.scheduled == {"a": 1} and plan.admitted == []
    plan = schedule([], [seq("b", 30), seq("c", 3, arrival=1.0)], num_free_blocks=20, cfg=cfg)
    assert plan.admitted == ["b", "c"]  # the whole batch at once
    assert plan.scheduled == {"b": 16}  # c's prefill waits for the next step's budget


def test_max_num_seqs_caps_the_batch():
    cfg = SchedulerConfig(block_size=4, max_num_seqs=2, max_step_tokens=64)
    plan = schedule([seq("a", 5, 4)], [seq("b", 2), seq("c", 2)], num_free_blocks=10, cfg=cfg)
    assert plan.admitted == ["b"]


@pytest.mark.parametrize("field", ["block_size", "max_num_seqs", "max_step_tokens"])
def test_config_validates(field):
    with pytest.raises(ValueError, match=field):
        SchedulerConfig(**{field: 0})


class Words:
    """A tokenizer stand-in: token 0 ends a sequence."""
    eos_ids = {0}

    def decode(self, ids) -> str:
        return " ".join(map(str, ids))


def owner(num_blocks: int):
    from llm.kv_cache import KVCacheManager
    from llm.metrics import LLMMetrics
    from llm.scheduler import Scheduler

    return Scheduler(CFG, KVCacheManager(num_blocks, CFG.block_size), Words(), LLMMetrics(), lambda: 0.0)


def request(rid: str, prompt: list[int], max_tokens: int, arrival: float = 0.0):
    from llm.requests import LLMRequest
    from llm.sampling import SamplingParams

    return LLMRequest(rid, prompt, SamplingParams(max_tokens=max_tokens), 0, arrival, stream=False)


def test_the_scheduler_owns_the_requests_and_every_block_it_hands_out():
    s = owner(6)
    long, short = request("long", list(range(1, 13)), 3), request("short", [5, 6], 1, arrival=1.0)
    s.add_request(long)
    s.add_request(short)
    step = s.schedule()
    assert [(r.request_id, n) for r, n in step] == [("long", 12), ("short", 2)]
    assert (len(long.blocks), len(short.blocks), s.kv_cache.num_free) == (3, 1, 2)
    assert s.update_from_output(step, [7, 8]) == [short] and short.finish_reason == "length"
    assert short.blocks == [] and s.kv_cache.num_free == 3 and list(s.running) == ["long"]
    step = s.schedule()  # the 13th token's position needs a fourth block
    assert [(r.request_id, n) for r, n in step] == [("long", 1)] and len(long.blocks) == 4
    assert s.update_from_output(step, [0]) == [long] and long.finish_reason == "stop"
    assert long.output_ids == [7] and s.kv_cache.num_free == 6 and not s.has_unfinished()


def test_preempted_and_aborted_requests_give_their_blocks_back():
    s = owner(4)
    first, second = request("first", list(range(1, 9)), 8), request("second", list(range(1, 9)), 8, arrival=1.0)
    s.add_request(first)
    s.add_request(second)
    step = s.schedule()
    assert s.kv_cache.num_free == 0
    s.update_from_output(step, [9, 9])  # each at 9 tokens: a third block each, and none is free
    step = s.schedule()
    assert [r.request_id for r, _ in step] == ["first"] and list(s.waiting) == ["second"]
    assert second.blocks == [] and second.num_computed_tokens == 0 and second.num_preemptions == 1
    assert len(first.blocks) == 3 and s.kv_cache.num_free == 1
    s.abort("first")
    assert s.update_from_output(step, [9]) == [] and first.output_ids == [9]  # aborted meanwhile: no token
    s.schedule()
    assert first.finish_reason == "abort" and first.blocks == [] and list(s.running) == ["second"]
    s.abort_all()
    s.reap_aborted()
    assert s.kv_cache.num_free == 4 and not s.has_work()
