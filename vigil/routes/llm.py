"""/v1/captions and /v1/ask: what the LLM wrote about the streams, and questions about
what the cameras saw. Included behind the API key unless `open_llm_routes`."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from vigil.routes.deps import ServiceDep
from vigil.services.errors import Invalid

router = APIRouter(prefix="/v1", tags=["llm"])


class AskIn(BaseModel):
    model_config = ConfigDict(allow_inf_nan=False)

    question: str = Field(min_length=1, max_length=2000)
    stream: str | None = Field(None, max_length=64)
    since: float | None = Field(None, ge=-1e15, le=1e15, description="stream time, ms")
    until: float | None = Field(None, ge=-1e15, le=1e15, description="stream time, ms")


@router.get("/captions")
def captions(service: ServiceDep, stream: str | None = Query(None, max_length=64),
             since_ms: float | None = Query(None, ge=-1e15, le=1e15),
             until_ms: float | None = Query(None, ge=-1e15, le=1e15),
             limit: int = Query(100, ge=1, le=1000)) -> dict:
    """Scene captions the LLM wrote per stream, newest last."""
    return {"captions": service.storage.captions(stream, since_ms, until_ms, limit)}


@router.post("/ask")
async def ask(body: AskIn, service: ServiceDep) -> dict:
    """Answer a question about what the cameras saw, with citations."""
    future = service.llm.submit_ask(body.question, body.stream, body.since, body.until)
    try:
        return await asyncio.wrap_future(future)
    except ValueError as exc:
        raise Invalid(f"question: {exc}") from None
