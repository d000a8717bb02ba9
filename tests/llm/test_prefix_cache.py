"""Automatic prefix caching in the LLM engine (llm/block_pool.py): a request whose prompt
begins with full blocks another request computed starts on them; greedy output is the
same token for token with it on and off, through chunked prefill and preemption; and
the hit rate shows in the metrics."""

from __future__ import annotations

import pytest
from tiny import make_tiny_llama

from llm.checkpoint import load_model
from llm.engine import EngineConfig, LLMEngine
from llm.sampling import SamplingParams
from llm.tokenizer import Tokenizer

SHARED = " ".join(f"t{i}" for i in range(3, 23))  # 20 tokens: five blocks of four
PROMPTS = [f"{SHARED} t50 t51", f"{SHARED} t60", f"{SHARED} t70 t71 t72", "t9 t8 t7", f"{SHARED} t50 t51"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_llama(tmp_path_factory.mktemp("tiny-prefix"), seed=3)


def run(tiny, caching: bool, together: bool, **config) -> tuple[list[list[int]], LLMEngine]:
    engine = LLMEngine(load_model(tiny), Tokenizer(tiny, eos_ids=(96,)),
                       EngineConfig(**{"num_blocks": 64, "block_size": 4, "prefix_caching": caching, **config}))
    handles = []
    for prompt in PROMPTS:
        handles.append(engine.add_request(prompt, SamplingParams(max_tokens=12, ignore_eos=True)))
        engine.step()
        while not together and engine.has_work():  # one after another: each finds the last one's blocks
            engine.step()
    while engine.has_work():
        engine.step()
    engine.close()
    return [h.request.output_ids for h in handles], engine


def sample(engine: LLMEngine, name: str) -> float:
    return engine.metrics.registry.get_sample_value(name, {"model_name": engine.name}) or 0.0


@pytest.mark.parametrize("together", [False, True], ids=["one-after-another", "joining-mid-flight"])
def test_the_output_is_the_same_and_the_shared_prefix_is_computed_once(tiny, together):
    off, engine_off = run(tiny, False, together)
    on, engine_on = run(tiny, True, together)
    assert on == off
    assert sample(engine_off, "vigil_llm_prefix_cache_hits_total") == 0
    hits = sample(engine_on, "vigil_llm_prefix_cache_hits_total")
    queries = sample(engine_on, "vigil_llm_prefix_cache_queries_total")
    assert queries == sum(len(engine_on.tokenizer.encode(p)) for p in PROMPTS)
    if not together:  # three later prompts find the shared 20 tokens (the repeated one too: its 6th block
        assert hits == 20 * 3  # holds its last token, which is computed again)
    assert hits > 0 and sample(engine_on, "vigil_llm_prefix_cache_hit_ratio") == pytest.approx(hits / queries)


def test_chunked_prefill_and_preemption_keep_the_output(tiny):
    # 12 blocks of 4 for five requests of up to 35 tokens, 6 tokens a step: prompts are
    # prefilled in chunks, and requests are preempted and recomputed from what is cached
    tight = {"num_blocks": 12, "max_step_tokens": 6}
    off, _ = run(tiny, False, True, **tight)
    on, engine = run(tiny, True, True, **tight)
    assert on == off
    assert sample(engine, "vigil_llm_num_preemptions_total") > 0
    assert sample(engine, "vigil_llm_prefix_cache_hits_total") > 0
    assert engine.scheduler.kv_cache.num_free == 12  # every block given back (cached ones stay named, free)
