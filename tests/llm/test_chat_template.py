"""Chat requests through the checkpoint's own chat_template, as transformers renders it."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from llm.serving import load_llm
from support.processes import ROOT
from vigil.openai_protocol import ChatCompletionRequest, RequestError, start

SCENE_LM = ROOT / "configs" / "models" / "scene-lm" / "1"
TEMPLATE = ("{{ bos_token }}{% for m in messages %}"
            "{% if m['role'] == 'system' %}facts: {{ m['content'] }}\n"
            "{% elif m['role'] == 'user' %}question: {{ m['content'] }}\n"
            "{% else %}answer: {{ m['content'] }}{{ eos_token }}\n{% endif %}"
            "{% endfor %}{% if add_generation_prompt %}answer:{% endif %}")
STRICT = ("{% if messages[0]['role'] != 'system' %}{{ raise_exception('a conversation starts with a system "
          "message') }}{% endif %}" + TEMPLATE)
CONVERSATIONS = [
    [{"role": "user", "content": "how many people crossed midblock?"}],
    [{"role": "system", "content": "view: person 2, car 1"}, {"role": "user", "content": "how many cars?"}],
    [{"role": "system", "content": "view: bike 3"}, {"role": "user", "content": "and bikes?"},
     {"role": "assistant", "content": "3 bikes."}, {"role": "user", "content": "when?"}],
]


@pytest.fixture
def chat_lm(tmp_path):
    """scene-lm with a chat template, as a repository of one model."""
    folder = tmp_path / "chat-lm" / "1"
    shutil.copytree(SCENE_LM, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": TEMPLATE}))
    return tmp_path, folder


def hf_ids(folder, messages) -> list[int]:
    from transformers import AutoTokenizer

    out = AutoTokenizer.from_pretrained(folder).apply_chat_template(messages, add_generation_prompt=True,
                                                                   tokenize=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def test_prompt_ids_equal_apply_chat_template(chat_lm):
    from llm.tokenizer import Tokenizer

    _, folder = chat_lm
    tok = Tokenizer(folder)
    for messages in CONVERSATIONS:
        assert tok.chat(messages) == hf_ids(folder, messages)


def test_greedy_chat_equals_transformers_generate(chat_lm):
    from transformers import AutoModelForCausalLM

    root, folder = chat_lm
    engine = load_llm(root, "chat-lm", "cpu")
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    try:
        for messages in CONVERSATIONS:
            body = ChatCompletionRequest(messages=messages, max_tokens=16, temperature=0.0, ignore_eos=True)
            handle = start(engine, body, 10_000).handle
            while engine.has_work():
                engine.step()
            ids = torch.tensor([hf_ids(folder, messages)])
            with torch.no_grad():
                ref = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=16, min_new_tokens=16,
                                     do_sample=False, eos_token_id=None, pad_token_id=0)[0, ids.shape[1]:].tolist()
            assert handle.request.prompt_ids == ids[0].tolist()
            assert handle.request.output_ids == ref
    finally:
        engine.close()


def test_a_template_that_refuses_the_conversation_is_a_request_error(chat_lm):
    root, folder = chat_lm
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": STRICT}))
    engine = load_llm(root, "chat-lm", "cpu")
    try:
        with pytest.raises(RequestError, match="messages: a conversation starts with a system message"):
            start(engine, ChatCompletionRequest(messages=CONVERSATIONS[0], max_tokens=4), 10_000)
    finally:
        engine.close()


def test_without_a_template_a_single_user_message_is_the_prompt_as_it_is():
    from llm.chat import plain

    assert plain(CONVERSATIONS[0]) == CONVERSATIONS[0][0]["content"]
    assert plain(CONVERSATIONS[1]).endswith("user: how many cars?\nassistant:")
