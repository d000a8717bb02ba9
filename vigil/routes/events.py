"""/v1/events (stored events, filtered and paged), an event's snapshot, crop and clip,
and the dashboard's /v1/overview, once or as server-sent events."""

from __future__ import annotations

import asyncio
import json
from typing import Literal

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import FileResponse, Response, StreamingResponse

from core.events import EVENT_TYPES
from vigil.routes.deps import ServiceDep
from vigil.storage import MAX_EVENT_ID

router = APIRouter(prefix="/v1")


@router.get("/events", tags=["events"])
def events(service: ServiceDep, app: str | None = Query(None, max_length=64),
           stream: str | None = Query(None, max_length=64),
           type: str | None = Query(None, json_schema_extra={"enum": list(EVENT_TYPES)}),
           since_ms: float | None = Query(None, ge=-1e15, le=1e15),
           until_ms: float | None = Query(None, ge=-1e15, le=1e15),
           after_id: int = Query(0, ge=0, le=MAX_EVENT_ID), limit: int = Query(100, ge=1, le=10_000),
           order: Literal["asc", "desc"] = Query("asc", description="desc: newest first"),
           before_id: int | None = Query(None, ge=1, le=MAX_EVENT_ID)) -> dict:
    """Filter by app, stream, type and stream-time range. Oldest first, paged with
    `after_id` (the previous page's `next_after_id`); or `order=desc`, newest first,
    paged with `before_id` (the previous page's `next_before_id`)."""
    return service.events.query(app, stream, type, since_ms, until_ms, after_id, limit, before_id,
                                newest_first=order == "desc")


@router.get("/events/{event_id}/snapshot.jpg", tags=["events"], response_class=FileResponse)
def event_snapshot(service: ServiceDep, event_id: int = Path(ge=1, le=MAX_EVENT_ID)) -> FileResponse:
    """The frame the event was seen on, with the object's box drawn (snapshots on)."""
    return FileResponse(service.events.snapshot(event_id), media_type="image/jpeg")


@router.get("/events/{event_id}/crop.jpg", tags=["events"], response_class=FileResponse)
def event_crop(service: ServiceDep, event_id: int = Path(ge=1, le=MAX_EVENT_ID)) -> FileResponse:
    """The object alone: its box with a margin around it."""
    return FileResponse(service.events.snapshot(event_id, crop=True), media_type="image/jpeg")


@router.get("/events/{event_id}/clip.mp4", tags=["events"], response_class=Response,
            responses={200: {"content": {"video/mp4": {}}}})
def event_clip(service: ServiceDep, event_id: int = Path(ge=1, le=MAX_EVENT_ID)) -> Response:
    """The recording around the event: recording.pre_s before it (before its track began,
    for a track_end) to recording.post_s after it, from the keyframe before; remuxed,
    not re-encoded (recording on). Footage not yet recorded is not in it."""
    return Response(service.clips.event(event_id), media_type="video/mp4")


@router.get("/overview", tags=["dashboard"])
def overview(service: ServiceDep) -> dict:
    return service.overview()


@router.get("/overview/stream", tags=["dashboard"])
async def overview_stream(request: Request, service: ServiceDep,
                          interval_s: float = Query(1.0, ge=0.2, le=60)) -> StreamingResponse:
    """Server-sent events: the overview every `interval_s` seconds."""
    async def feed():
        while not await request.is_disconnected():
            yield f"data: {json.dumps(service.overview())}\n\n"
            await asyncio.sleep(interval_s)

    return StreamingResponse(feed(), media_type="text/event-stream", headers={"Cache-Control": "no-store"})
