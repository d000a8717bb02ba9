"""/v1/streams: register, list, show and delete streams."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, model_validator

from apps.spec import NAME_PATTERN
from streams.options import StreamOptions
from vigil.routes.deps import KEY, ServiceDep

router = APIRouter(prefix="/v1/streams", tags=["streams"])


class StreamIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=f"^{NAME_PATTERN.pattern}$", max_length=64,
                      description="lowercase letters, digits, '-' or '_'")
    url: str = Field(min_length=1, max_length=4096, pattern=r"^[^\x00-\x1f\x7f]+$",
                     description="rtsp://, http(s)://, /dev/videoN, synthetic://... or a file under "
                                 "limits.media_dirs")
    options: StreamOptions = Field(default_factory=StreamOptions)

    @model_validator(mode="before")
    @classmethod
    def _options_go_under_options(cls, data: Any) -> Any:
        if isinstance(data, dict):
            misplaced = sorted(set(data) & set(StreamOptions.model_fields))
            if misplaced:
                raise ValueError(f"{misplaced[0]}: stream options go under \"options\": "
                                 f"{{\"options\": {{\"{misplaced[0]}\": ...}}}}")
        return data


@router.post("", status_code=201, dependencies=KEY)
def add_stream(body: StreamIn, service: ServiceDep) -> dict:
    return service.streams.add(body.name, body.url, body.options)


@router.get("")
def list_streams(service: ServiceDep) -> list[dict]:
    return service.streams.list()


@router.get("/{name}")
def get_stream(name: str, service: ServiceDep) -> dict:
    return service.streams.get(name)


@router.get("/{name}/recordings")
def stream_recordings(name: str, service: ServiceDep) -> list[dict]:
    """The stream's recorded segments, oldest first, in stream time (recording on)."""
    return service.clips.segments(name)


@router.get("/{name}/clip.mp4", response_class=Response, responses={200: {"content": {"video/mp4": {}}}})
def stream_clip(name: str, service: ServiceDep, start_ms: float = Query(ge=-1e15, le=1e15),
                end_ms: float = Query(ge=-1e15, le=1e15)) -> Response:
    """The recording from the keyframe at or before `start_ms` to `end_ms` (stream time,
    as events' `t_ms`: wall-clock ms for a camera), remuxed, not re-encoded; at most
    recording.max_clip_s long."""
    return Response(service.clips.window(name, start_ms, end_ms), media_type="video/mp4")


class StreamPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(None, min_length=1, max_length=4096, pattern=r"^[^\x00-\x1f\x7f]+$",
                            description="the new source; the current one when omitted")
    options: StreamOptions | None = Field(None, description="the options to change (those sent); the others "
                                                            "stay as they are")


@router.patch("/{name}", dependencies=KEY)
def patch_stream(name: str, body: StreamPatch, service: ServiceDep) -> dict:
    """Start the stream again from a new url or with changed options; its apps stay
    (their tracks and counts start again)."""
    changed = body.options.model_dump(include=body.options.model_fields_set) if body.options else {}
    return service.patch_stream(name, body.url, changed)


@router.delete("/{name}", status_code=204, dependencies=KEY)
def delete_stream(name: str, service: ServiceDep) -> Response:
    service.streams.delete(name)
    return Response(status_code=204)
