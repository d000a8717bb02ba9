"""The LLM on the same server: the official `openai` client, captions, questions."""

from __future__ import annotations

import json

import httpx
import pytest
from openai import OpenAI

from support.processes import ROOT, wait_for

CAPTION_PROMPT = ("facts: view: person 2, car 1, bike 0 | cross: midblock car in 1 | enter: person 1 | "
                  "leave: none\ncaption:")


@pytest.fixture
def client(server, api):
    wait_for(lambda: any(m.get("kind") == "llm" for m in api.get("/v1/models").json()["data"]), 120, "LLM loaded")
    return OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


def test_greedy_text_equals_transformers_on_the_same_folder(client):
    """The checkpoint's tokenizer (its post-processor adds <s>) and weights, read by
    transformers itself, against the served model through the official client."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = ROOT / "configs" / "models" / "scene-lm" / "1"
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    prompts = [CAPTION_PROMPT, "context: count person line midblock direction in = 3\nquestion: how many people "
               "crossed midblock inbound?\nanswer:", "facts: view: car 4"]
    for prompt in prompts:
        ids = tok(prompt, return_tensors="pt").input_ids
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=24, do_sample=False,
                                 pad_token_id=tok.pad_token_id)
        want = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
        got = client.completions.create(model="scene-lm", prompt=prompt, max_tokens=24, temperature=0)
        assert got.choices[0].text == want, prompt
        assert got.usage.prompt_tokens == ids.shape[1]


def test_models_list_includes_the_llm(client):
    ids = [m.id for m in client.models.list()]
    assert "scene-lm" in ids and "scenedet" in ids


def test_completion_and_its_stream_agree(client):
    done = client.completions.create(model="scene-lm", prompt=CAPTION_PROMPT, max_tokens=40, temperature=0, stop=["\n"])
    text = done.choices[0].text
    assert text.strip().startswith("2 people and 1 car in view.")
    assert done.usage.prompt_tokens > 10 and done.usage.completion_tokens > 5
    pieces = list(client.completions.create(model="scene-lm", prompt=CAPTION_PROMPT, max_tokens=40, temperature=0,
                                            stop=["\n"], stream=True))
    assert "".join(p.choices[0].text for p in pieces) == text
    assert pieces[-1].choices[0].finish_reason in ("stop", "length")


def test_chat_and_its_stream(client):
    msgs = [{"role": "user", "content": CAPTION_PROMPT}]
    done = client.chat.completions.create(model="scene-lm", messages=msgs, max_tokens=40, temperature=0)
    assert "2 people" in done.choices[0].message.content
    chunks = list(client.chat.completions.create(model="scene-lm", messages=msgs, max_tokens=40, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == done.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == done.usage.completion_tokens


def test_raw_stream_ends_with_done_and_errors_are_4xx(server, api):
    with httpx.stream("POST", f"{server.url}/v1/completions", timeout=60,
                      json={"prompt": CAPTION_PROMPT, "max_tokens": 8, "stream": True}) as r:
        lines = [line for line in r.iter_lines() if line]
    assert lines[-1] == "data: [DONE]" and json.loads(lines[0][6:])["object"] == "text_completion"
    assert api.post("/v1/completions", json={"prompt": "", "max_tokens": 5}).status_code == 422
    assert api.post("/v1/completions", json={"prompt": "x", "max_tokens": 0}).status_code == 422
    assert api.post("/v1/completions", json={"prompt": "x", "model": "gpt-9"}).status_code == 404
    assert api.post("/v1/chat/completions", json={"messages": "hi"}).status_code == 422
    text = api.get("/metrics").text
    for name in ("vigil_llm_num_requests_running", "vigil_llm_kv_cache_usage_ratio",
                 "vigil_llm_time_to_first_token_seconds_bucket", "vigil_llm_generation_tokens_total"):
        assert name in text


def test_captions_appear_for_the_stream(api, client):
    wait_for(lambda: api.get("/v1/captions", params={"stream": "street"}).json()["captions"], 90, "a caption")
    cap = api.get("/v1/captions", params={"stream": "street"}).json()["captions"][0]
    assert cap["t_end_ms"] > cap["t_start_ms"]
    assert "in view." in cap["text"]
    assert cap["facts"].startswith("view: person")


def test_live_captions_cite_the_stored_events_they_describe(api, client):
    def citing():
        caps = api.get("/v1/captions", params={"stream": "street"}).json()["captions"]
        return [c for c in caps if c["event_ids"]]

    cap = wait_for(citing, 120, "a caption citing events")[0]
    events = {e["id"]: e for e in api.get("/v1/events", params={"stream": "street", "limit": 1000,
                                                                 "until_ms": cap["t_end_ms"] + 1}).json()["events"]}
    for i in cap["event_ids"]:
        assert i in events, (i, cap)
        assert events[i]["type"] in ("track_start", "track_end", "line_cross")
        assert cap["t_start_ms"] - 1 <= events[i]["t_ms"] <= cap["t_end_ms"] + 1


def test_ask_answers_with_the_exact_count_and_cites_events(api, client):
    wait_for(lambda: api.get("/v1/events", params={"app": "people", "type": "line_cross"}).json()["events"], 90,
             "a crossing")
    r = api.post("/v1/ask", json={"question": "how many people crossed midblock?", "stream": "street"})
    assert r.status_code == 200, r.text
    out = r.json()
    n = int(out["aggregate"].rsplit("=", 1)[1])
    assert out["answer"].startswith(f"{n} ")
    cited = [i for c in out["citations"] for i in c["event_ids"]]
    crossings = api.get("/v1/events", params={"app": "people", "type": "line_cross", "limit": 1000}).json()["events"]
    assert len([e for e in crossings if e["id"] in cited and e["line"] == "midblock"]) == n
    assert api.post("/v1/ask", json={"question": "what is the weather?"}).status_code == 422
    assert api.post("/v1/ask", json={"question": "how many cars crossed midblock?", "stream": "nope"}).status_code == 404


def test_asked_anything_the_server_answers_or_refuses_never_fails(server, api, client):
    """A window with one end once answered 500. A sample of the generated questions (the
    parser's own sweep takes thousands) through the route: 200 or a 422 that says what
    can be asked."""
    from support.questions import questions

    r = api.post("/v1/ask", json={"question": "How many people crossed midblock after 0:04?", "stream": "street"})
    assert r.status_code == 200, r.text
    assert r.json()["question"]["t_to_ms"] is None and " after 0:04" in r.json()["aggregate"]
    statuses = {}
    for text in questions(60, ["midblock"], [], seed=3):
        r = api.post("/v1/ask", json={"question": text or "?", "stream": "street"})
        statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
        assert r.status_code in (200, 422), (text, r.status_code, r.text)
        if r.status_code == 422:
            assert r.json()["detail"].startswith("question: "), r.text
    assert statuses.get(200, 0) >= 5 and statuses.get(422, 0) >= 5, statuses
    assert api.get("/v1/captions", params={"stream": "street"}).json()["captions"]  # so questions ranked them
    assert "%|" not in server.logs()  # no library's progress bar (the caption ranker's encode had one)
