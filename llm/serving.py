"""LLM models of the repository and the OpenAI-compatible request handling that the
REST routes and the CLI share.

An LLM model is a folder `configs/models/<name>/<version>/` in Hugging Face format
(`config.json`, `*.safetensors`, `tokenizer.json`); the latest version is served.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from llm.engine import EngineConfig, LLMEngine, Output, RequestHandle
from llm.model import LlamaModel
from llm.sampling import SamplingParams
from llm.tokenizer import Tokenizer

DEFAULT_LLM = "scene-lm"


def latest_version(root: Path, name: str) -> Path:
    """The folder of a model's newest version in the repository (`root/name/N/`)."""
    folder = Path(root) / name
    complete = [v for v in folder.iterdir() if v.is_dir() and v.name.isdigit()
                and (v / "config.json").exists() and (v / "tokenizer.json").exists()] if folder.is_dir() else []
    versions = sorted(int(v.name) for v in complete)
    if not versions:
        raise FileNotFoundError(f"{folder}: no LLM versions (a folder N/ with config.json, *.safetensors and "
                                "tokenizer.json)")
    return folder / str(versions[-1])


def load_llm(root: Path, name: str, device: str = "cpu", config: EngineConfig | None = None, vision=None,
             metrics=None) -> LLMEngine:
    path = latest_version(root, name)
    model = LlamaModel.from_pretrained(path, device)
    tok = Tokenizer(path, eos_ids=model.cfg.eos_ids)
    return LLMEngine(model, tok, config, name=name, vision=vision, metrics=metrics)


class RequestError(ValueError):
    """A malformed OpenAI-style request; the message names the field."""


@dataclass(frozen=True)
class Completion:
    handle: RequestHandle
    model: str
    kind: str  # "text_completion" | "chat.completion"
    request_id: str
    created: int


def sampling_from(body: dict[str, Any]) -> SamplingParams:
    stop = body.get("stop") or ()
    if isinstance(stop, str):
        stop = (stop,)
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
    try:
        return SamplingParams(max_tokens=int(64 if max_tokens is None else max_tokens),
                              temperature=float(body.get("temperature", 1.0) if body.get("temperature") is not None
                                                else 1.0),
                              top_p=float(body.get("top_p") if body.get("top_p") is not None else 1.0),
                              seed=body.get("seed"), stop=tuple(str(s) for s in stop),
                              ignore_eos=bool(body.get("ignore_eos", False)))
    except (TypeError, ValueError) as exc:
        raise RequestError(str(exc)) from None


def chat_prompt(messages: Any) -> str:
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages: give a non-empty list of {role, content}")
    lines = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("content"), str) or m.get("role") not in (
                "system", "user", "assistant"):
            raise RequestError(f"messages.{i}: needs role (system | user | assistant) and string content")
        lines.append(m["content"] if m["role"] == "user" and len(messages) == 1 else f"{m['role']}: {m['content']}")
    # scene-lm is not a chat model: a single user message is its prompt as it is
    return "\n".join(lines) + ("" if len(messages) == 1 else "\nassistant:")


def start(engine: LLMEngine, body: dict[str, Any], chat: bool, priority: int = 5) -> Completion:
    if body.get("n", 1) != 1:
        raise RequestError("n: only 1 is supported")
    prompt = chat_prompt(body.get("messages")) if chat else body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not (isinstance(prompt, str) and prompt) and not (isinstance(prompt, list) and prompt and
                                                         all(isinstance(t, int) for t in prompt)):
        raise RequestError("prompt: give a non-empty string (or a list of token ids)")
    params = sampling_from(body)
    handle = engine.add_request(prompt, params, priority=priority, stream=bool(body.get("stream")))
    return Completion(handle, engine.name, "chat.completion" if chat else "text_completion",
                      f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}", int(time.time()))


def _usage(c: Completion) -> dict:
    r = c.handle.request
    return {"prompt_tokens": len(r.prompt_ids), "completion_tokens": len(r.output_ids),
            "total_tokens": len(r.prompt_ids) + len(r.output_ids)}


def _reason(reason: str | None) -> str | None:
    return {"abort": "stop", "error": "stop"}.get(reason, reason) if reason else None


def complete(c: Completion, timeout_s: float = 600.0) -> dict:
    out: Output = c.handle.result(timeout_s)
    choice = {"index": 0, "finish_reason": _reason(out.finish_reason)}
    if c.kind == "chat.completion":
        choice["message"] = {"role": "assistant", "content": out.text}
    else:
        choice.update(text=out.text, logprobs=None)
    return {"id": c.request_id, "object": c.kind, "created": c.created, "model": c.model, "choices": [choice],
            "usage": _usage(c)}


def stream_chunks(c: Completion, include_usage: bool = False, timeout_s: float = 600.0) -> Iterator[dict]:
    chat = c.kind == "chat.completion"
    kind = "chat.completion.chunk" if chat else "text_completion"
    base = {"id": c.request_id, "object": kind, "created": c.created, "model": c.model}
    if chat:
        yield {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
    for out in c.handle.stream(timeout_s):
        if out.text or out.finish_reason:
            delta = {"content": out.text} if out.text else {}
            choice = {"index": 0, "finish_reason": _reason(out.finish_reason)}
            choice.update({"delta": delta} if chat else {"text": out.text, "logprobs": None})
            yield {**base, "choices": [choice]}
    if include_usage:
        yield {**base, "choices": [], "usage": _usage(c)}
