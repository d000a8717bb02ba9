"""LoRA adapters in peft's format, served per request (unmerged, mixed in one batch with
the base model and each other) or merged: the engine's greedy tokens equal peft's own
model (the adapter applied, not merged) on a random tiny Llama with random LoRA
weights; a repository model's adapters are served by load_llm; what does not fit its
base is refused by name at load."""

from __future__ import annotations

import json
import random

import pytest
import torch
from tiny import generate_joining, make_tiny_llama, transformers_greedy

from llm.adapters import AdapterError
from llm.checkpoint import load_model
from llm.engine import EngineConfig, LLMEngine
from llm.model import CheckpointError
from llm.sampling import SamplingParams
from llm.serving import load_llm
from llm.tokenizer import Tokenizer

ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def save_adapter(base, folder, seed: int, **options):
    """peft's LoRA on `base` with random A and B (peft starts B at zero), saved; the peft model."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    hf = LlamaForCausalLM.from_pretrained(base)
    cfg = LoraConfig(init_lora_weights=False, task_type="CAUSAL_LM", **options)
    model = get_peft_model(hf, cfg).eval()
    with torch.no_grad():  # updates as large as the weights: a merge that went wrong changes the tokens
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.mul_(4.0)
    model.save_pretrained(folder)
    return model


@pytest.mark.parametrize("options", [
    {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                 "down_proj"]},
    {"r": 2, "lora_alpha": 3, "use_rslora": True, "target_modules": ["v_proj", "down_proj"]},
], ids=["all-projections", "rslora-two"])
def test_merged_adapter_decodes_as_peft_does(tmp_path, options):
    base = make_tiny_llama(tmp_path / "base", seed=3)
    peft_model = save_adapter(base, tmp_path / "lora", seed=4, **options)
    model = load_model(base, lora=tmp_path / "lora")
    plain = load_model(base)
    assert not torch.equal(model.layers[0].v_proj.weight, plain.layers[0].v_proj.weight)
    engine = LLMEngine(model, Tokenizer(base, eos_ids=(96,)), EngineConfig(num_blocks=64, block_size=4))
    rng = random.Random(1)
    prompts = [" ".join(f"t{rng.randint(1, 90)}" for _ in range(rng.randint(3, 12))) for _ in range(4)]
    handles = generate_joining(engine, prompts, rng, most=16)
    for h in handles:
        assert h.request.output_ids == transformers_greedy(peft_model, h)


def test_the_base_and_two_adapters_mixed_in_one_batch_each_decode_as_their_reference(tmp_path):
    """Requests for the base model and two adapters join one another mid-flight (prefills
    and decodes of all three in the same steps), the same prompt through each: every
    request's tokens are its reference's (transformers for the base, peft unmerged for an
    adapter), so none borrows another's update or another's cached prefix."""
    from transformers import LlamaForCausalLM

    base = make_tiny_llama(tmp_path / "base", seed=3)
    refs = {None: LlamaForCausalLM.from_pretrained(base).eval(),
            "wide": save_adapter(base, tmp_path / "wide", seed=4, r=4, lora_alpha=8, target_modules=ALL),
            "two": save_adapter(base, tmp_path / "two", seed=5, r=2, lora_alpha=3, use_rslora=True,
                                target_modules=["v_proj", "down_proj"])}
    engine = LLMEngine(load_model(base), Tokenizer(base, eos_ids=(96,)), EngineConfig(num_blocks=96, block_size=4))
    engine.load_lora("wide", tmp_path / "wide")
    engine.load_lora("two", tmp_path / "two")
    rng = random.Random(1)
    prompts = [" ".join(f"t{rng.randint(1, 90)}" for _ in range(rng.randint(9, 14))) for _ in range(3)]
    handles = []
    try:
        for p in prompts:
            for adapter in (None, "wide", "two"):
                params = SamplingParams(max_tokens=rng.randint(8, 14), ignore_eos=True)
                handles.append((adapter, engine.add_request(p, params, lora=adapter)))
                engine.step()
        while engine.has_work():
            engine.step()
    finally:
        engine.close()
    for adapter, h in handles:
        assert h.request.output_ids == transformers_greedy(refs[adapter], h), adapter
    outputs = {a: [h.request.output_ids for b, h in handles if b == a] for a in refs}
    assert outputs[None] != outputs["wide"] and outputs[None] != outputs["two"]  # the adapters change the tokens


def test_load_llm_serves_the_repositorys_adapters_or_merges_one(tmp_path):
    make_tiny_llama(tmp_path / "tiny" / "1", seed=3)
    save_adapter(tmp_path / "tiny" / "1", tmp_path / "tiny" / "scene-lora", seed=5, r=4, lora_alpha=4,
                 target_modules=["q_proj", "up_proj"])
    (tmp_path / "tiny" / "model_config.yaml").write_text("adapters:\n  scene: scene-lora\n")
    served, merged = load_llm(tmp_path, "tiny"), load_llm(tmp_path, "tiny", merged="scene")
    try:
        assert (served.adapters.names(), merged.adapters.names()) == (["scene"], [])
        plain, folded = served.model.layers[1], merged.model.layers[1]
        assert not torch.equal(plain.up_proj.weight, folded.up_proj.weight)
        assert torch.equal(plain.down_proj.weight, folded.down_proj.weight)
        with pytest.raises(FileNotFoundError, match=r"no adapter 'other'; adapters: \['scene'\]"):
            load_llm(tmp_path, "tiny", merged="other")
    finally:
        served.close()
        merged.close()


def test_adapters_load_and_unload_at_run_time_within_their_limits(tmp_path):
    base = make_tiny_llama(tmp_path / "base", seed=3)
    for k in range(3):
        save_adapter(base, tmp_path / f"a{k}", seed=k, r=2 + 6 * (k == 2), lora_alpha=2, target_modules=["q_proj"])
    engine = LLMEngine(load_model(base), Tokenizer(base, eos_ids=(96,)),
                       EngineConfig(num_blocks=64, block_size=4, max_loras=2, max_lora_rank=4))
    engine.load_lora("a0", tmp_path / "a0")
    with pytest.raises(AdapterError, match=r"'a0' is loaded already"):
        engine.load_lora("a0", tmp_path / "a1")
    with pytest.raises(CheckpointError, match=r"rank 8 is over the most served, 4"):
        engine.load_lora("a2", tmp_path / "a2")
    engine.load_lora("a1", tmp_path / "a1")
    with pytest.raises(AdapterError, match=r"2 adapters are loaded, the most held"):
        engine.load_lora("a3", tmp_path / "a0")
    with pytest.raises(AdapterError, match=r"no adapter 'nope' on llm; loaded: \['a0', 'a1'\]"):
        engine.add_request("t1 t2", lora="nope")
    handle = engine.add_request("t1 t2", SamplingParams(max_tokens=3), lora="a1")
    with pytest.raises(AdapterError, match=r"'a1' is in use by 1 requests"):
        engine.unload_lora("a1")
    while engine.has_work():
        engine.step()
    assert handle.result(5).finish_reason in ("length", "stop")
    engine.unload_lora("a1")
    assert engine.adapters.names() == ["a0"]
    engine.close()


def test_a_missing_adapter_folder_is_named(tmp_path):
    make_tiny_llama(tmp_path / "tiny" / "1", seed=3)
    (tmp_path / "tiny" / "model_config.yaml").write_text("adapters:\n  scene: scene\n")
    with pytest.raises(CheckpointError, match=r"scene: no adapter_config.json"):
        load_llm(tmp_path, "tiny")


@pytest.mark.parametrize("change, message", [
    ({"use_dora": True}, r"use_dora=True is not supported"),
    ({"bias": "all"}, r"bias='all' is not supported"),
    ({"rank_pattern": {"q_proj": 4}}, r"rank_pattern=\{'q_proj': 4\} is not supported"),
    ({"peft_type": "IA3"}, r"only LORA adapters"),
    ({"r": 0}, r"r must be a positive integer"),
])
def test_adapters_that_cannot_be_merged_exactly_are_refused(tmp_path, change, message):
    base = make_tiny_llama(tmp_path / "base", seed=3)
    save_adapter(base, tmp_path / "lora", seed=4, r=2, lora_alpha=2, target_modules=["q_proj"])
    path = tmp_path / "lora" / "adapter_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    with pytest.raises(CheckpointError, match=message):
        load_model(base, lora=tmp_path / "lora")


def test_an_adapter_of_another_base_model_is_refused(tmp_path):
    save_adapter(make_tiny_llama(tmp_path / "wide", hidden=96), tmp_path / "lora", seed=4, r=2, lora_alpha=2,
                 target_modules=["o_proj"])
    with pytest.raises(CheckpointError, match=r"o_proj's update is \(96, 96\), its weight \(64, 64\)"):
        load_model(make_tiny_llama(tmp_path / "base", hidden=64), lora=tmp_path / "lora")


def test_an_adapter_of_another_base_model_is_refused_at_run_time_load(tmp_path):
    save_adapter(make_tiny_llama(tmp_path / "wide", hidden=96), tmp_path / "lora", seed=4, r=2, lora_alpha=2,
                 target_modules=["o_proj"])
    base = make_tiny_llama(tmp_path / "base", hidden=64)
    engine = LLMEngine(load_model(base), Tokenizer(base), EngineConfig(num_blocks=16, block_size=4))
    with pytest.raises(CheckpointError, match=r"o_proj's A is \(2, 96\) and B \(96, 2\); rank 2 on this base "
                                              r"needs \(2, 64\) and \(64, 2\)"):
        engine.load_lora("wide", tmp_path / "lora")
    assert engine.adapters.names() == []
    engine.close()
