"""Greedy decoding equals Hugging Face transformers token for token: batches of mixed
lengths, requests joining mid-flight, prefill in chunks, and preemption."""

from __future__ import annotations

import random

import pytest
import torch
from tiny import make_tiny_llama

from llm.checkpoint import load_model
from llm.cuda_graphs import graph_sizes
from llm.engine import EngineConfig, LLMEngine
from llm.sampling import SamplingParams
from llm.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_llama(tmp_path_factory.mktemp("tiny"))


# cpu: the eager step; cpu-static: the padded fixed-shape step that CUDA graphs replay,
# run eagerly (prefill chunks and decodes alike); cuda: steps replayed as captured graphs
MODES = ["cpu", "cpu-static", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs CUDA")])]


def make_engine(folder, config: EngineConfig, mode: str) -> LLMEngine:
    engine = LLMEngine(load_model(folder, device_of(mode)), Tokenizer(folder), config)
    if mode == "cpu-static":
        engine.use_step_graphs(capture=False)
    assert (engine.graphs is not None) == (mode != "cpu")
    return engine


def device_of(mode: str) -> str:
    return "cuda" if mode == "cuda" else "cpu"


def hf_greedy(folder, prompt: list[int], n: int, device: str = "cpu") -> list[int]:
    from transformers import LlamaForCausalLM

    key = (folder, device)
    model = _hf_cache.get(key) or _hf_cache.setdefault(key, LlamaForCausalLM.from_pretrained(folder).to(device).eval())
    with torch.no_grad():
        ids = torch.tensor([prompt], device=device)  # an explicit mask: token 0 is not padding here
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
@pytest.mark.parametrize("mode", MODES)
def test_greedy_tokens_equal_transformers(tiny, config, mode):
    rng = random.Random(3)
    jobs = [(rng.randint(0, 12), [rng.randint(0, 95) for _ in range(rng.randint(1, 30))], rng.randint(1, 20))
            for _ in range(8)]
    engine = make_engine(tiny, config, mode)
    got = run_engine(engine, jobs)
    for i, (_, prompt, n) in enumerate(jobs):
        assert got[i] == hf_greedy(tiny, prompt, n, device_of(mode)), f"request {i} (prompt {len(prompt)} tokens)"
    assert engine.scheduler.kv_cache.num_free == config.num_blocks
    if engine.graphs is not None:
        assert engine.graphs.steps == engine.num_steps, "a step did not go through the padded static path"
    if config.num_blocks == 12:
        assert engine.metrics.preemptions._value.get() > 0, "the small pool should have forced preemption"


def test_graph_sizes_cover_every_step():
    assert graph_sizes(1) == [1]
    assert graph_sizes(5) == [1, 2, 4, 5]
    assert graph_sizes(32) == [1, 2, 4, 8, 16, 24, 32]
    for cap in (1, 3, 8, 20, 33, 256, 512, 1000):
        sizes = graph_sizes(cap)
        assert sizes[0] == 1 and sizes[-1] == cap
        assert all(b - a <= max(8, a // 2 + 8) for a, b in zip(sizes, sizes[1:])), sizes  # padding stays bounded
