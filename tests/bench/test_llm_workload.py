"""`vigil bench llm`'s caption workload and its prefix-cache comparison: a chat model's
caption requests share their instruction (the prefix the KV cache keeps), scene-lm's use
its own prompt, and the time to first token is compared at one rate."""

from __future__ import annotations

import random

import pytest

from bench.llm import caption_ids, same_rate_ttft
from llm.facts import caption_prompt
from llm.scene_corpus import random_facts
from llm.tokenizer import Tokenizer
from support.processes import ROOT

SMOLLM2 = ROOT / "configs" / "models" / "smollm2-135m-instruct" / "1"
SCENE_LM = ROOT / "configs" / "models" / "scene-lm" / "1"


def shared_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_a_chat_models_caption_requests_share_their_instruction():
    if not (SMOLLM2 / "SmolLM2-135M-Instruct.Q4_1.gguf").is_file():
        pytest.fail(f"{SMOLLM2}: run `vigil models fetch` (make install does)")
    tok = Tokenizer(SMOLLM2)
    rng = random.Random(1)
    first, second = caption_ids(tok, random_facts(rng)), caption_ids(tok, random_facts(rng))
    assert shared_prefix(first, second) >= 64 and first != second  # the instruction: four blocks and more
    scene = Tokenizer(SCENE_LM)
    facts = random_facts(rng)
    assert caption_ids(scene, facts) == scene.encode(caption_prompt(facts))  # no chat template: its own prompt


def test_the_time_to_first_token_is_compared_at_the_rate_without_the_cache_reached():
    asked = []

    def trial(name: str, rate: float) -> dict:
        asked.append((name, rate))
        return {"mean_ttft_s": 0.05}

    same = same_rate_ttft({"rate_per_s": 2.5, "mean_ttft_s": 0.2}, trial)
    assert asked == [("vigil", 2.5)]
    assert same == {"rate_per_s": 2.5, "with_cache_ms": 50.0, "without_ms": 200.0, "ratio": 4.0}
    assert same_rate_ttft({"rate_per_s": 0.0, "mean_ttft_s": None}, trial) is None
