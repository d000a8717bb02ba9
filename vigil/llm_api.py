"""OpenAI-compatible LLM routes: /v1/completions, /v1/chat/completions (SSE streaming
ending in `data: [DONE]`), plus /v1/captions and /v1/ask over what the apps recorded.
Thin adapters over `llm.serving` and the service.

Generating is the most expensive thing a client can ask for, so these routes sit
behind the API key (unless `open_llm_routes`), their bodies are bounded
(`llm.serving`'s models), the engine's waiting queue is bounded (503 with Retry-After
past it), and no thread waits for a generation: the handlers await the engine's
outputs on the event loop, and a request whose client has gone is cancelled.
"""

from __future__ import annotations

import asyncio
import json

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from llm import serving
from llm.engine import EngineFull
from vigil.auth import require_key
from vigil.service import Invalid, Overloaded, ServiceError

TIMEOUT_S = 600.0
# one server-sent event: `data:` is a JSON chunk, or `[DONE]` at the end
SSE_EVENT = {"type": "object", "required": ["data"],
             "properties": {"data": {"type": "string"}, "event": {"type": "string"}}}


class AskIn(BaseModel):
    model_config = ConfigDict(allow_inf_nan=False)

    question: str = Field(min_length=1, max_length=2000)
    stream: str | None = Field(None, max_length=64)
    since: float | None = Field(None, ge=-1e15, le=1e15, description="stream time, ms")
    until: float | None = Field(None, ge=-1e15, le=1e15, description="stream time, ms")


class GenerationError(ServiceError):
    status = 500


def llm_router(open_routes: bool = False) -> APIRouter:
    router = APIRouter(prefix="/v1", dependencies=[] if open_routes else [Depends(require_key)])

    async def _run(request: Request, body: serving.CompletionRequest | serving.ChatCompletionRequest):
        service = request.app.state.service
        engine = service.llm_engine(body.model)
        try:
            c = serving.start(engine, body, service.settings.limits.max_prompt_chars)
        except serving.RequestError as exc:
            raise Invalid(str(exc)) from None
        except EngineFull as exc:
            raise Overloaded(str(exc)) from None
        if not body.stream:
            out = await _unless_client_leaves(request, c.handle.aresult(TIMEOUT_S), c.handle.cancel)
            if out is None:
                return Response(status_code=499)  # nobody is listening
            try:
                return serving.response(c, out)
            except serving.GenerationFailed as exc:
                raise GenerationError(str(exc)) from None
        include_usage = bool(body.stream_options and body.stream_options.include_usage)

        async def sse():
            try:
                async for chunk in serving.chunks(c, include_usage, TIMEOUT_S):
                    yield f"data: {json.dumps(chunk)}\n\n"
                yield "data: [DONE]\n\n"
            finally:
                c.handle.cancel()  # a no-op when finished; the client went away otherwise

        return StreamingResponse(sse(), media_type="text/event-stream")

    streamed = {200: {"description": "the completion, or with `stream: true` its pieces as server-sent events",
                      "content": {"application/json": {}, "text/event-stream": {"schema": SSE_EVENT}}}}

    @router.post("/completions", tags=["llm"], responses=streamed)
    async def completions(body: serving.CompletionRequest, request: Request):
        """OpenAI-compatible text completion (`stream: true` for server-sent events)."""
        return await _run(request, body)

    @router.post("/chat/completions", tags=["llm"], responses=streamed)
    async def chat_completions(body: serving.ChatCompletionRequest, request: Request):
        """OpenAI-compatible chat completion (`stream: true` for server-sent events)."""
        return await _run(request, body)

    @router.get("/captions", tags=["llm"])
    def captions(request: Request, stream: str | None = Query(None, max_length=64),
                 since_ms: float | None = Query(None, ge=-1e15, le=1e15),
                 until_ms: float | None = Query(None, ge=-1e15, le=1e15),
                 limit: int = Query(100, ge=1, le=1000)) -> dict:
        """Scene captions the LLM wrote per stream, newest last."""
        return {"captions": request.app.state.service.storage.captions(stream, since_ms, until_ms, limit)}

    @router.post("/ask", tags=["llm"])
    async def ask(body: AskIn, request: Request) -> dict:
        """Answer a question about what the cameras saw, with citations."""
        service = request.app.state.service
        future = service.submit_ask(body.question, body.stream, body.since, body.until)
        try:
            return await asyncio.wrap_future(future)
        except ValueError as exc:
            raise Invalid(f"question: {exc}") from None

    return router


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
