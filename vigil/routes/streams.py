"""/v1/streams: register, list, show and delete streams."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, model_validator

from apps.spec import NAME_PATTERN
from streams.live import StreamOptions
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


@router.delete("/{name}", status_code=204, dependencies=KEY)
def delete_stream(name: str, service: ServiceDep) -> Response:
    service.streams.delete(name)
    return Response(status_code=204)
