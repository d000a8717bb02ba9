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
from tiny import generate_joining, transformers_greedy

from llm.engine import EngineConfig
from llm.model import CheckpointError, LlamaConfig
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
    "phi3": ("Phi3Config", {"sliding_window": None, "pad_token_id": 0}),  # fused qkv_proj and gate_up_proj
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
    handles = generate_joining(engine, prompts, rng, 20)
    hf = AutoModelForCausalLM.from_pretrained(folder).eval()
    for p, h in zip(prompts, handles):
        assert h.request.output_ids == transformers_greedy(hf, h), (name, p)


def test_rope_parameters_of_transformers_5_are_read(tmp_path):
    folder = tmp_path / "llama3-rope" / "1"
    folder.mkdir(parents=True)
    save_family(folder, "llama3-rope")
    raw = json.loads((folder / "config.json").read_text())
    assert "rope_scaling" not in raw or not raw["rope_scaling"]  # saved the transformers 5 way
    cfg = LlamaConfig.from_file(folder / "config.json")
    assert cfg.rope_type == "llama3" and dict(cfg.rope_params)["factor"] == 8.0


@pytest.mark.parametrize("change, says", [
    ({"model_type": "gpt2"}, "model_type: supported are llama, mistral, qwen2, qwen3, phi3; was 'gpt2'"),
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


CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant:{% endif %}")


@pytest.fixture(scope="module")
def served_families(tmp_path_factory):
    """`vigil serve` with a Qwen3-layout checkpoint (with a chat template) as its LLM."""
    from support.processes import VigilServer

    root = tmp_path_factory.mktemp("llm-repo")
    folder = root / "qwen3" / "1"
    folder.mkdir(parents=True)
    save_family(folder, "qwen3")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": CHAT_TEMPLATE}))
    # its own: a repository holding the LLM families
    server = VigilServer(tmp_path_factory.mktemp("llm-serve") / "data",
                         config={"model_repository": str(root), "llm_model": "qwen3", "caption_every_s": 0})
    server.start(180)
    yield server, folder
    server.stop()


def test_served_completions_and_chat_equal_transformers(served_families):
    from concurrent.futures import ThreadPoolExecutor

    from openai import OpenAI
    from transformers import AutoModelForCausalLM, AutoTokenizer

    server, folder = served_families
    client = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    prompts = ["facts: view: person 2", "context: count car line midblock direction in = 4\nquestion:" * 2, "hi"]
    chats = [[{"role": "user", "content": "how many cars?"}],
             [{"role": "system", "content": "view: bike 3"}, {"role": "user", "content": "and bikes?"}]]
    with ThreadPoolExecutor(5) as pool:  # at once: mixed lengths in one running batch
        texts = [pool.submit(lambda p, n: client.completions.create(model="qwen3", prompt=p, max_tokens=n,
                                                                     temperature=0).choices[0].text, p, 8 + 4 * i)
                 for i, p in enumerate(prompts)]
        replies = [pool.submit(lambda m: client.chat.completions.create(model="qwen3", messages=m, max_tokens=10,
                                                                        temperature=0).choices[0].message.content, m)
                   for m in chats]
        texts, replies = [f.result(120) for f in texts], [f.result(120) for f in replies]
    tok = AutoTokenizer.from_pretrained(folder)
    hf = AutoModelForCausalLM.from_pretrained(folder).eval()

    def greedy(ids: list[int], n: int) -> str:
        x = torch.tensor([ids])
        with torch.no_grad():
            out = hf.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False,
                              pad_token_id=0)
        return tok.decode(out[0, len(ids):], skip_special_tokens=True)

    for i, (p, text) in enumerate(zip(prompts, texts)):
        assert text == greedy(tok(p).input_ids, 8 + 4 * i), p
    for m, reply in zip(chats, replies):
        ids = tok.apply_chat_template(m, add_generation_prompt=True, tokenize=True)
        ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        assert reply == greedy(ids, 10), m
