"""Greedy decoding equals Hugging Face transformers token for token: batches of mixed
lengths, requests joining mid-flight, prefill in chunks, and preemption."""

from __future__ import annotations

import random

import pytest
import torch

from llm.engine import EngineConfig, LLMEngine
from llm.model import LlamaModel
from llm.sampling import SamplingParams
from llm.tokenizer import Tokenizer
from tiny import make_tiny_llama


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_llama(tmp_path_factory.mktemp("tiny"))


def hf_greedy(folder, prompt: list[int], n: int) -> list[int]:
    from transformers import LlamaForCausalLM

    model = _hf_cache.get(folder) or _hf_cache.setdefault(folder, LlamaForCausalLM.from_pretrained(folder).eval())
    with torch.no_grad():
        ids = torch.tensor([prompt])  # an explicit mask: token 0 is not padding here
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                             do_sample=False, eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()


_hf_cache: dict = {}


def run_engine(engine: LLMEngine, jobs: list[tuple[int, list[int], int]]) -> dict[int, list[int]]:
    """jobs: (step at which it joins, prompt, tokens); steps the engine by hand."""
    handles, step = {}, 0
    pending = sorted(enumerate(jobs), key=lambda j: j[1][0])
    while pending or engine.has_work():
        while pending and pending[0][1][0] <= step:
            i, (_, prompt, n) = pending.pop(0)
            handles[i] = engine.add_request(prompt, SamplingParams(max_tokens=n, ignore_eos=True))
        engine.step()
        step += 1
    return {i: h.request.output_ids for i, h in handles.items()}


@pytest.mark.parametrize("config", [
    EngineConfig(num_blocks=64, block_size=16, max_step_tokens=256),
    EngineConfig(num_blocks=64, block_size=4, max_step_tokens=7),  # prefill in chunks of odd sizes
    EngineConfig(num_blocks=12, block_size=4, max_step_tokens=32),  # too few blocks: preemption by recompute
], ids=["plain", "chunked", "preempting"])
def test_greedy_tokens_equal_transformers(tiny, config):
    rng = random.Random(3)
    jobs = [(rng.randint(0, 12), [rng.randint(0, 95) for _ in range(rng.randint(1, 30))], rng.randint(1, 20))
            for _ in range(8)]
    engine = LLMEngine(LlamaModel.from_pretrained(tiny), Tokenizer(tiny), config)
    got = run_engine(engine, jobs)
    for i, (_, prompt, n) in enumerate(jobs):
        assert got[i] == hf_greedy(tiny, prompt, n), f"request {i} (prompt {len(prompt)} tokens)"
    assert engine.pool.num_free == config.num_blocks
    if config.num_blocks == 12:
        assert engine.metrics.preemptions._value.get() > 0, "the small pool should have forced preemption"
