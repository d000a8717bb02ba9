"""OpenAI-compatible completions: /v1/completions and /v1/chat/completions (SSE
streaming ending in `data: [DONE]`), thin adapters over vigil/openai_protocol.py.

A request names a served id as its `model`: an LLM's base model, or `<llm>:<adapter>`
for one of its LoRA adapters (vigil/routes/lora.py loads and unloads them); its
`response_format` (or vLLM's `structured_outputs`, `guided_*`) holds the output to a
JSON schema, a regex, choices or a grammar (400 when that cannot be).

Generating is the most expensive thing a client can ask for, so these routes are
included behind the API key (unless `open_llm_routes`), their bodies are bounded (the
protocol's models), the engine's waiting queue is bounded (503 with Retry-After past
it), and no thread waits for a generation: the handlers await the engine's outputs on
the event loop, and a request whose client has gone is cancelled.
"""

from __future__ import annotations

import asyncio
import json

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from llm.engine import EngineFull
from vigil import openai_protocol as protocol
from vigil.routes.deps import ServiceDep
from vigil.service import Vigil
from vigil.services.errors import BadRequest, GenerationError, Invalid, Overloaded

router = APIRouter(prefix="/v1", tags=["llm"])

TIMEOUT_S = 600.0
# one server-sent event: `data:` is a JSON chunk, or `[DONE]` at the end
SSE_EVENT = {"type": "object", "required": ["data"],
             "properties": {"data": {"type": "string"}, "event": {"type": "string"}}}
STREAMED = {200: {"description": "the completion, or with `stream: true` its pieces as server-sent events",
                  "content": {"application/json": {}, "text/event-stream": {"schema": SSE_EVENT}}}}


@router.post("/completions", responses=STREAMED)
async def completions(body: protocol.CompletionRequest, request: Request, service: ServiceDep):
    """OpenAI-compatible text completion (`stream: true` for server-sent events)."""
    return await _run(request, service, body)


@router.post("/chat/completions", responses=STREAMED)
async def chat_completions(body: protocol.ChatCompletionRequest, request: Request, service: ServiceDep):
    """OpenAI-compatible chat completion (`stream: true` for server-sent events)."""
    return await _run(request, service, body)


async def _run(request: Request, service: Vigil, body: protocol.CompletionRequest | protocol.ChatCompletionRequest):
    served = service.llm.engine_for(body.model)
    try:  # on a thread: a structured output's grammar compiles on admission
        c = await asyncio.to_thread(protocol.start, served.engine, body, service.settings.limits.max_prompt_chars,
                                    adapter=served.adapter)
    except protocol.StructuredOutputError as exc:
        raise BadRequest(str(exc)) from None
    except protocol.RequestError as exc:
        raise Invalid(str(exc)) from None
    except EngineFull as exc:
        raise Overloaded(str(exc)) from None
    if not body.stream:
        out = await _unless_client_leaves(request, c.handle.aresult(TIMEOUT_S), c.handle.cancel)
        if out is None:
            return Response(status_code=499)  # nobody is listening
        try:
            return protocol.response(c, out)
        except protocol.StructuredOutputError as exc:  # a grammar the model's vocabulary cannot follow
            raise BadRequest(str(exc)) from None
        except protocol.GenerationFailed as exc:
            raise GenerationError(str(exc)) from None
    include_usage = bool(body.stream_options and body.stream_options.include_usage)

    async def sse():
        try:
            async for chunk in protocol.chunks(c, include_usage, TIMEOUT_S):
                yield f"data: {json.dumps(chunk)}\n\n"
            yield "data: [DONE]\n\n"
        finally:
            c.handle.cancel()  # a no-op when finished; the client went away otherwise

    return StreamingResponse(sse(), media_type="text/event-stream")


async def _unless_client_leaves(request: Request, work, cancel):
    """The result of `work`, or None (after `cancel()`) when the client disconnects first."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if task in done:
        return task.result()
    task.cancel()
    cancel()
    return None


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
