"""OpenAI-compatible LLM routes: /v1/completions, /v1/chat/completions (SSE streaming
ending in `data: [DONE]`), plus /v1/captions and /v1/ask over what the apps recorded.
Thin adapters over `llm.serving` and the service."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field
from starlette.concurrency import iterate_in_threadpool, run_in_threadpool

from llm import serving
from vigil.service import Invalid, ServiceError

OPENAI_BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "additionalProperties": True, "properties": {
        "model": {"type": "string"}, "prompt": {"type": "string"}, "messages": {"type": "array"},
        "max_tokens": {"type": "integer", "minimum": 1, "maximum": 2048}, "temperature": {"type": "number"},
        "top_p": {"type": "number"}, "stop": {}, "stream": {"type": "boolean"}, "seed": {"type": "integer"}}}}}}}


class AskIn(BaseModel):
    question: str = Field(min_length=1, max_length=2000)
    stream: str | None = None
    since: float | None = Field(None, description="stream time, ms")
    until: float | None = Field(None, description="stream time, ms")


def llm_router() -> APIRouter:
    router = APIRouter(prefix="/v1")

    async def _body(request: Request) -> dict[str, Any]:
        try:
            body = json.loads(await request.body() or b"null")
        except ValueError as exc:
            raise Invalid(f"body: not valid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise Invalid("body: send a JSON object")
        return body

    async def _run(request: Request, chat: bool):
        service = request.app.state.service
        body = await _body(request)
        engine = service.llm_engine(body.get("model"))
        try:
            c = serving.start(engine, body, chat)
        except (serving.RequestError, ValueError) as exc:
            raise Invalid(str(exc)) from None
        if not body.get("stream"):
            try:
                return await run_in_threadpool(serving.complete, c)
            finally:
                c.handle.cancel()  # a no-op when finished; frees the blocks if the client left
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        async def sse():
            try:
                async for chunk in iterate_in_threadpool(serving.stream_chunks(c, include_usage)):
                    yield f"data: {json.dumps(chunk)}\n\n"
                yield "data: [DONE]\n\n"
            finally:
                c.handle.cancel()  # the client went away: stop generating

        return StreamingResponse(sse(), media_type="text/event-stream")

    @router.post("/completions", tags=["llm"], openapi_extra=OPENAI_BODY)
    async def completions(request: Request):
        """OpenAI-compatible text completion (`stream: true` for server-sent events)."""
        return await _run(request, chat=False)

    @router.post("/chat/completions", tags=["llm"], openapi_extra=OPENAI_BODY)
    async def chat_completions(request: Request):
        """OpenAI-compatible chat completion (`stream: true` for server-sent events)."""
        return await _run(request, chat=True)

    @router.get("/captions", tags=["llm"])
    def captions(request: Request, stream: str | None = None, since_ms: float | None = None,
                 until_ms: float | None = None, limit: int = Query(100, ge=1, le=1000)) -> dict:
        """Scene captions the LLM wrote per stream, newest last."""
        return {"captions": request.app.state.service.storage.captions(stream, since_ms, until_ms, limit)}

    @router.post("/ask", tags=["llm"])
    def ask(body: AskIn, request: Request) -> dict:
        """Answer a question about what the cameras saw, with citations."""
        service = request.app.state.service
        try:
            return service.ask(body.question, body.stream, body.since, body.until)
        except ValueError as exc:
            raise Invalid(f"question: {exc}") from None

    return router


__all__ = ["llm_router", "ServiceError"]
