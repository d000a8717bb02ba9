"""LoRA adapters in peft's format, merged at load: the engine's greedy tokens equal peft's
own model (the adapter applied, not merged) on a random tiny Llama with random LoRA
weights; a repository model's `lora` is applied by load_llm; what cannot be merged
exactly is refused by name."""

from __future__ import annotations

import json
import random

import pytest
import torch
from tiny import generate_joining, make_tiny_llama, transformers_greedy

from llm.checkpoint import load_model
from llm.engine import EngineConfig, LLMEngine
from llm.model import CheckpointError
from llm.serving import load_llm
from llm.tokenizer import Tokenizer


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


def test_load_llm_merges_the_repositorys_adapter(tmp_path):
    make_tiny_llama(tmp_path / "tiny" / "1", seed=3)
    save_adapter(tmp_path / "tiny" / "1", tmp_path / "tiny" / "scene", seed=5, r=4, lora_alpha=4,
                 target_modules=["q_proj", "up_proj"])
    (tmp_path / "tiny" / "model_config.yaml").write_text("lora: scene\n")
    tuned, base = load_llm(tmp_path, "tiny"), load_llm(tmp_path, "tiny", lora=False)
    try:
        assert (tuned.lora, base.lora) == ("scene", None)
        assert not torch.equal(tuned.model.layers[1].up_proj.weight, base.model.layers[1].up_proj.weight)
        assert torch.equal(tuned.model.layers[1].down_proj.weight, base.model.layers[1].down_proj.weight)
    finally:
        tuned.close()
        base.close()


def test_a_missing_adapter_folder_is_named(tmp_path):
    make_tiny_llama(tmp_path / "tiny" / "1", seed=3)
    (tmp_path / "tiny" / "model_config.yaml").write_text("lora: scene\n")
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
