"""The OpenAI protocol: request bodies (with the bounds this server enforces), admitting
one to the LLM engine, and the answer as a whole or as streamed pieces. The routes in
vigil/routes/openai.py are thin adapters over these; the engine knows nothing of them.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, AsyncIterator, Literal

from pydantic import BaseModel, ConfigDict, Field

from core.numbers import json_int
from llm.sampling import SamplingParams
from llm.serving import model_id
from llm.structured import (MAX_CHOICE_CHARS, MAX_CHOICES, MAX_SPEC_CHARS, UNSATISFIABLE, Constraint,
                            ConstraintError)

if TYPE_CHECKING:
    from llm.engine import LLMEngine
    from llm.requests import Output, RequestHandle

MAX_TOKENS = 65_536  # beyond any context served here; the context itself is checked on admission


class RequestError(ValueError):
    """A malformed OpenAI-style request; the message names the field."""


class StructuredOutputError(RequestError):
    """A structured output that is malformed, over the limits, or cannot be compiled (400)."""


class GenerationFailed(RuntimeError):
    """The engine failed this request (not the client's mistake); the message says why."""


class StreamingOptions(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    include_usage: bool = False


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, populate_by_name=True)

    name: str = Field("output", max_length=64)
    description: str | None = Field(None, max_length=1024)
    schema_: dict = Field(alias="schema", description=f"a JSON schema, at most {MAX_SPEC_CHARS} characters")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


Choices = Annotated[list[Annotated[str, Field(min_length=1, max_length=MAX_CHOICE_CHARS)]],
                    Field(min_length=1, max_length=MAX_CHOICES)]
Spec = Annotated[str, Field(min_length=1, max_length=MAX_SPEC_CHARS)]


class StructuredOutputs(BaseModel):
    """vLLM's `structured_outputs`: one of them."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    json_: dict | Spec | None = Field(None, alias="json", description="a JSON schema (an object, or as text)")
    json_object: bool | None = None
    regex: Spec | None = None
    choice: Choices | None = None
    grammar: Spec | None = Field(None, description="an EBNF grammar (xgrammar's)")


class SamplingFields(BaseModel):
    # strict: `"stream": "yes"` or `"seed": "12"` is a mistake to report, not to guess at
    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)

    model: str | None = Field(None, max_length=256)
    max_tokens: json_int(ge=1, le=MAX_TOKENS) | None = Field(None, description="default 64")
    max_completion_tokens: json_int(ge=1, le=MAX_TOKENS) | None = Field(None, description="max_tokens' newer name")
    temperature: float | None = Field(None, ge=0, le=2, description="0: greedy; default 1")
    top_p: float | None = Field(None, gt=0, le=1)
    seed: json_int(ge=0, le=2**53 - 1) | None = Field(None, description="at most 2**53 - 1, exact in every JSON client")
    stop: Annotated[str, Field(min_length=1, max_length=256)] | \
        list[Annotated[str, Field(min_length=1, max_length=256)]] | None = Field(None, max_length=8)
    stream: bool = False
    stream_options: StreamingOptions | None = None
    n: json_int(ge=1, le=1) = Field(1, description="only 1")
    ignore_eos: bool = False
    response_format: ResponseFormat | None = Field(None, description="json_object, or json_schema: the output "
                                                   "is held to it by constrained decoding")
    structured_outputs: StructuredOutputs | None = Field(None, description="vLLM's: json, json_object, regex, "
                                                         "choice or grammar")
    guided_json: dict | Spec | None = Field(None, description="vLLM's older name of structured_outputs.json")
    guided_regex: Spec | None = None
    guided_choice: Choices | None = None
    guided_grammar: Spec | None = None


class CompletionRequest(SamplingFields):
    prompt: Annotated[str, Field(min_length=1)] | Annotated[list[Annotated[str, Field(min_length=1)]],
                                                            Field(min_length=1, max_length=1)] | \
        Annotated[list[json_int(ge=0, le=2**31)], Field(min_length=1)] = Field(
            description="a string (or a list of one string, or of token ids), at most limits.max_prompt_chars "
                        "characters")


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    role: Literal["system", "user", "assistant"]
    content: str


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1, max_length=256)


@dataclass(frozen=True)
class Completion:
    handle: RequestHandle
    model: str
    kind: str  # "text_completion" | "chat.completion"
    request_id: str
    created: int


def constraint_from(body: SamplingFields) -> tuple[str, Constraint | None]:
    """The structured output a request asks for (at most one way) and the field that asks
    for it, or ("", None)."""
    import json

    so = body.structured_outputs or StructuredOutputs()
    fmt = body.response_format
    given = {"response_format": None if fmt is None or fmt.type == "text" else fmt,
             "structured_outputs.json": so.json_, "structured_outputs.json_object": so.json_object or None,
             "structured_outputs.regex": so.regex, "structured_outputs.choice": so.choice,
             "structured_outputs.grammar": so.grammar, "guided_json": body.guided_json,
             "guided_regex": body.guided_regex, "guided_choice": body.guided_choice,
             "guided_grammar": body.guided_grammar}
    asked = [k for k, v in given.items() if v is not None]
    if len(asked) > 1:
        raise StructuredOutputError(f"structured output: give one of {', '.join(asked)}, not several")
    if not asked:
        return "", None
    key, value = asked[0], given[asked[0]]
    try:
        if key == "response_format":
            if value.type == "json_object":
                return key, Constraint.json_object()
            if value.json_schema is None:
                raise StructuredOutputError("response_format: type json_schema needs json_schema: {name, schema}")
            return key, Constraint.json_schema(value.json_schema.schema_)
        if key.endswith("json"):
            if isinstance(value, str):
                try:
                    value = json.loads(value)
                except ValueError as exc:
                    raise StructuredOutputError(f"{key}: not JSON: {exc}") from None
            return key, Constraint.json_schema(value)
        if key.endswith("json_object"):
            return key, Constraint.json_object()
        if key.endswith("regex"):
            return key, Constraint.regex(value)
        if key.endswith("choice"):
            return key, Constraint.choice(value)
        return key, Constraint.grammar(value)
    except ConstraintError as exc:
        raise StructuredOutputError(f"{key}: {exc}") from None


def sampling_from(body: SamplingFields, constraint: Constraint | None = None) -> SamplingParams:
    """RequestError names what is wrong."""
    stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
    max_tokens = body.max_completion_tokens if body.max_tokens is None else body.max_tokens
    try:
        return SamplingParams(max_tokens=64 if max_tokens is None else max_tokens,
                              temperature=1.0 if body.temperature is None else body.temperature,
                              top_p=1.0 if body.top_p is None else body.top_p, seed=body.seed, stop=stop,
                              ignore_eos=body.ignore_eos, constraint=constraint)
    except ValueError as exc:
        raise RequestError(str(exc)) from None


def start(engine: LLMEngine, body: CompletionRequest | ChatCompletionRequest, max_prompt_chars: int,
          priority: int = 5, adapter: str | None = None) -> Completion:
    """Admit a request to `engine` (through its LoRA `adapter`, or the base model); a
    structured output's grammar is compiled here, so call it off the event loop.
    RequestError names a field, EngineFull means come back later."""
    from llm.chat import TemplateError

    chat = isinstance(body, ChatCompletionRequest)
    if chat:
        size = sum(len(m.content) for m in body.messages)  # before any template renders them
        if size > max_prompt_chars:
            raise RequestError(f"messages: at most {max_prompt_chars} characters (limits.max_prompt_chars); "
                               f"was {size}")
        try:
            prompt = engine.tokenizer.chat([m.model_dump() for m in body.messages])
        except TemplateError as exc:
            raise RequestError(f"messages: {exc}") from None
    else:
        prompt = body.prompt[0] if isinstance(body.prompt, list) and isinstance(body.prompt[0], str) else body.prompt
        size = len(prompt)  # characters of text, or token ids
        if size > max_prompt_chars:
            raise RequestError(f"prompt: at most {max_prompt_chars} characters (limits.max_prompt_chars); "
                               f"was {size}")
    field, constraint = constraint_from(body)
    params = sampling_from(body, constraint)
    try:
        handle = engine.add_request(prompt, params, priority=priority, stream=body.stream, lora=adapter)
    except ConstraintError as exc:  # the backend could not compile it
        raise StructuredOutputError(f"{field}: {exc}") from None
    except ValueError as exc:
        raise RequestError(str(exc)) from None
    return Completion(handle, model_id(engine.name, adapter), "chat.completion" if chat else "text_completion",
                      f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}", int(time.time()))


def _usage(c: Completion) -> dict:
    r = c.handle.request
    return {"prompt_tokens": len(r.prompt_ids), "completion_tokens": len(r.output_ids),
            "total_tokens": len(r.prompt_ids) + len(r.output_ids)}


def _reason(reason: str | None) -> str | None:
    return "stop" if reason == "abort" else reason


def response(c: Completion, out: Output) -> dict:
    """The whole answer to a request that was not streamed."""
    if out.finish_reason == UNSATISFIABLE:
        raise StructuredOutputError(out.error)
    if out.finish_reason == "error":
        raise GenerationFailed(f"generation failed: {out.error}")
    choice = {"index": 0, "finish_reason": _reason(out.finish_reason)}
    if c.kind == "chat.completion":
        choice["message"] = {"role": "assistant", "content": out.text}
    else:
        choice.update(text=out.text, logprobs=None)
    return {"id": c.request_id, "object": c.kind, "created": c.created, "model": c.model, "choices": [choice],
            "usage": _usage(c)}


async def chunks(c: Completion, include_usage: bool = False, timeout_s: float = 600.0) -> AsyncIterator[dict]:
    """The pieces of a streamed answer; a failure ends it with an `error` piece."""
    chat = c.kind == "chat.completion"
    kind = "chat.completion.chunk" if chat else "text_completion"
    base = {"id": c.request_id, "object": kind, "created": c.created, "model": c.model}
    if chat:
        yield {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
    async for out in c.handle.astream(timeout_s):
        if out.finish_reason == UNSATISFIABLE:
            yield {"error": {"message": out.error, "type": "invalid_request_error", "code": 400}}
            return
        if out.finish_reason == "error":
            yield {"error": {"message": f"generation failed: {out.error}", "type": "server_error", "code": 500}}
            return
        if out.text or out.finish_reason:
            delta = {"content": out.text} if out.text else {}
            choice = {"index": 0, "finish_reason": _reason(out.finish_reason)}
            choice.update({"delta": delta} if chat else {"text": out.text, "logprobs": None})
            yield {**base, "choices": [choice]}
    if include_usage:
        yield {**base, "choices": [], "usage": _usage(c)}
