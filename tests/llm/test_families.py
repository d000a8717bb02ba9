"""Checkpoints of other Llama-family models, random-initialised and saved with
transformers' own `save_pretrained` beside scene-lm's tokenizer: greedy tokens through
Vigil's engine (mixed lengths, requests joining mid-flight) equal transformers'
`generate` on the same folder."""

from __future__ import annotations

import json
import random
import shutil

import pytest
import torch

from llm.engine import EngineConfig
from llm.model import CheckpointError, LlamaConfig
from llm.sampling import SamplingParams
from llm.serving import load_llm
from support.processes import ROOT

SCENE_LM = ROOT / "configs" / "models" / "scene-lm" / "1"
COMMON = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=False)
ROPE = {"rope_theta": 10000.0}
FAMILIES = {
    "llama3-rope": ("LlamaConfig", {"rope_parameters": {**ROPE, "rope_type": "llama3", "factor": 8.0,
                                                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                         "original_max_position_embeddings": 32}}),
    "linear-rope": ("LlamaConfig", {"rope_parameters": {**ROPE, "rope_type": "linear", "factor": 2.0}}),
    "dynamic-rope": ("LlamaConfig", {"rope_parameters": {**ROPE, "rope_type": "dynamic", "factor": 2.0}}),
    "yarn-rope": ("LlamaConfig", {"rope_parameters": {**ROPE, "rope_type": "yarn", "factor": 4.0,
                                                       "original_max_position_embeddings": 64}}),
    "qwen2": ("Qwen2Config", {}),
    "qwen3": ("Qwen3Config", {"head_dim": 16}),
    "mistral": ("MistralConfig", {"sliding_window": None}),
}


def save_family(folder, name: str) -> None:
    import transformers

    class_name, extra = FAMILIES[name]
    vocab = json.loads((SCENE_LM / "config.json").read_text())["vocab_size"]
    cfg = getattr(transformers, class_name)(vocab_size=vocab, bos_token_id=1, eos_token_id=2, **COMMON, **extra)
    torch.manual_seed(hash(name) % 1000)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    with torch.no_grad():  # larger weights than the init's: sharper logits, fewer near-ties
        for n, p in model.named_parameters():
            if p.dim() == 2:
                p.mul_(8.0)
            elif n.endswith("bias"):
                p.normal_(0, 0.5)  # Qwen2's q/k/v biases start at zero: make them count
    model.save_pretrained(folder, safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(SCENE_LM / f, folder / f)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_greedy_tokens_equal_transformers(tmp_path, name):
    from transformers import AutoModelForCausalLM

    folder = tmp_path / name / "1"
    folder.mkdir(parents=True)
    save_family(folder, name)
    rng = random.Random(5)
    prompts = ["facts: view: person 2, car 1\ncaption:", "context: count car line midblock direction in = 4",
               "question: when did the first bike appear? answer:" * 3, "hi"]
    engine = load_llm(tmp_path, name, "cpu", EngineConfig(num_blocks=64, block_size=8, max_step_tokens=24))
    try:
        handles = []
        for p in prompts:  # each joins while the others run
            handles.append(engine.add_request(p, SamplingParams(max_tokens=rng.randint(8, 20), ignore_eos=True)))
            engine.step()
        while engine.has_work():
            engine.step()
    finally:
        engine.close()
    hf = AutoModelForCausalLM.from_pretrained(folder).eval()
    for p, h in zip(prompts, handles):
        ids = torch.tensor([h.request.prompt_ids])
        n = len(h.request.output_ids)
        with torch.no_grad():
            ref = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                              do_sample=False, eos_token_id=None, pad_token_id=0)[0, ids.shape[1]:].tolist()
        assert h.request.output_ids == ref, (name, p)


def test_rope_parameters_of_transformers_5_are_read(tmp_path):
    folder = tmp_path / "llama3-rope" / "1"
    folder.mkdir(parents=True)
    save_family(folder, "llama3-rope")
    raw = json.loads((folder / "config.json").read_text())
    assert "rope_scaling" not in raw or not raw["rope_scaling"]  # saved the transformers 5 way
    cfg = LlamaConfig.from_file(folder / "config.json")
    assert cfg.rope_type == "llama3" and dict(cfg.rope_params)["factor"] == 8.0


@pytest.mark.parametrize("change, says", [
    ({"model_type": "gpt2"}, "model_type: supported are llama, mistral, qwen2, qwen3; was 'gpt2'"),
    ({"rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4}}, "rope type 'longrope' is not supported"),
    ({"mlp_bias": True}, "mlp_bias"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"partial_rotary_factor": 0.5}, "partial_rotary_factor"),
])
def test_unsupported_fields_are_refused_by_name(tmp_path, change, says):
    raw = {"model_type": "llama", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 16,
           "num_hidden_layers": 1, "num_attention_heads": 2, **change}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(CheckpointError, match=says):
        LlamaConfig.from_file(path)


def test_a_sliding_window_limits_the_context_served(tmp_path):
    raw = {"model_type": "mistral", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 16,
           "num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 4096, "sliding_window": 1024}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    assert LlamaConfig.from_file(path).max_position_embeddings == 1024
