"""REST API (FastAPI): thin routers over `vigil.service`. OpenAPI at /docs.

Errors: 422 names the field, 404 an unknown name, 409 a conflict, 401 a missing or
wrong key (only when keys are configured, and only on mutating routes), 413 a body
over the limit, 503 a limit reached. A client's mistake is never a 500.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import yaml
from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from prometheus_client import generate_latest
from pydantic import BaseModel, ConfigDict, Field

from vigil.dashboard import dashboard_router
from vigil.llm_api import llm_router
from vigil.prom import ServiceCollector
from vigil.service import LIVE_FIELDS, Invalid, ServiceError, Unauthorized, Vigil

JSON_OBJECT = {"type": "object", "additionalProperties": True}


class StreamIn(BaseModel):
    model_config = ConfigDict(extra="allow")  # any other field is a stream option

    name: str = Field(description="lowercase letters, digits, '-' or '_'")
    url: str = Field(description="rtsp://, http(s)://, /dev/videoN, synthetic://... or a file path")
    options: dict[str, Any] = Field(default_factory=dict, description="transport, open_timeout_s, "
                                    "read_timeout_s, backoff_initial_s, backoff_max_s, max_reconnects, "
                                    "buffer_frames, realtime, loop")


class LoadIn(BaseModel):
    versions: list[int] | None = None


class LabelIn(BaseModel):
    version: int


def require_key(request: Request) -> None:
    if not request.app.state.service.settings.authorized(request.headers.get("authorization")):
        raise Unauthorized("missing or invalid API key: send 'Authorization: Bearer KEY'")


async def _body(request: Request) -> Any:
    """JSON, or YAML with Content-Type application/yaml."""
    raw = await request.body()
    kind = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    try:
        if kind in ("application/yaml", "application/x-yaml", "text/yaml"):
            return yaml.safe_load(raw)
        return json.loads(raw or b"null")
    except (ValueError, yaml.YAMLError) as exc:
        raise Invalid(f"body: not valid {'YAML' if 'yaml' in kind else 'JSON'}: {exc}") from None


def _service(request: Request) -> Vigil:
    return request.app.state.service


def build_app(service: Vigil, lifespan=None) -> FastAPI:
    app = FastAPI(title="Vigil", version="0.1.0", lifespan=lifespan,
                  description="Video analytics serving: streams, camera apps, models, events, SLO metrics.")
    app.state.service = service
    registry = service.engine.metrics.registry
    registry.register(ServiceCollector(service))
    limit = service.settings.limits.max_body_bytes

    @app.exception_handler(ServiceError)
    async def _service_error(_: Request, exc: ServiceError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return JSONResponse({"detail": str(exc)}, status_code=exc.status, headers=headers)

    @app.middleware("http")
    async def _limit_body(request: Request, call_next):
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            return JSONResponse({"detail": f"body over {limit} bytes (limits.max_body_bytes)"}, status_code=413)
        return await call_next(request)

    mutating = [Depends(require_key)]
    v1 = APIRouter(prefix="/v1")

    @app.get("/healthz", tags=["system"])
    def healthz() -> dict:
        return {"status": "ok"}

    @app.get("/readyz", tags=["system"])
    def readyz(request: Request) -> JSONResponse:
        ready = _service(request).ready
        return JSONResponse({"ready": ready}, status_code=200 if ready else 503)

    @app.get("/metrics", tags=["system"], response_class=PlainTextResponse)
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type="text/plain; version=0.0.4")

    # -- streams --
    @v1.post("/streams", status_code=201, tags=["streams"], dependencies=mutating)
    def add_stream(body: StreamIn, request: Request) -> dict:
        options = {**body.options, **(body.model_extra or {})}
        return _service(request).add_stream(body.name, body.url, options)

    @v1.get("/streams", tags=["streams"])
    def list_streams(request: Request) -> list[dict]:
        return _service(request).streams()

    @v1.get("/streams/{name}", tags=["streams"])
    def get_stream(name: str, request: Request) -> dict:
        return _service(request).stream(name)

    @v1.delete("/streams/{name}", status_code=204, tags=["streams"], dependencies=mutating)
    def delete_stream(name: str, request: Request) -> Response:
        _service(request).delete_stream(name)
        return Response(status_code=204)

    # -- apps --
    app_body = {"requestBody": {"required": True, "content": {
        "application/json": {"schema": JSON_OBJECT},
        "application/yaml": {"schema": {"type": "string"}}}}}

    @v1.post("/apps", status_code=201, tags=["apps"], dependencies=mutating, openapi_extra=app_body)
    async def add_app(request: Request) -> dict:
        return _service(request).add_app(await _body(request))

    @v1.get("/apps", tags=["apps"])
    def list_apps(request: Request) -> list[dict]:
        return _service(request).list_apps()

    @v1.get("/apps/{name}", tags=["apps"])
    def get_app(name: str, request: Request) -> dict:
        return _service(request).app(name)

    patch_body = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
        "type": "object", "properties": {f: {} for f in LIVE_FIELDS}, "additionalProperties": False}}}}}

    @v1.patch("/apps/{name}", tags=["apps"], dependencies=mutating, openapi_extra=patch_body)
    async def patch_app(name: str, request: Request) -> dict:
        return _service(request).patch_app(name, await _body(request))

    @v1.delete("/apps/{name}", status_code=204, tags=["apps"], dependencies=mutating)
    def delete_app(name: str, request: Request) -> Response:
        _service(request).delete_app(name)
        return Response(status_code=204)

    @v1.get("/apps/{name}/metrics", tags=["apps"])
    def app_metrics(name: str, request: Request) -> dict:
        return _service(request).app_metrics(name)

    @v1.get("/apps/{name}/series", tags=["apps"])
    def app_series(name: str, request: Request, since_s: float = Query(3600.0, gt=0, le=86400)) -> list[dict]:
        return _service(request).app_series(name, since_s)

    @v1.get("/apps/{name}/frame.jpg", tags=["apps"], response_class=Response)
    def app_frame(name: str, request: Request) -> Response:
        return Response(_service(request).app_snapshot(name), media_type="image/jpeg",
                        headers={"Cache-Control": "no-store"})

    # -- models --
    @v1.get("/models", tags=["models"])
    def list_models(request: Request) -> dict:
        """Every model: vision models of the repository and the LLM, as an OpenAI-style
        list (`id`, `object`, `owned_by`) with Vigil's fields (`kind`: vision | llm)."""
        service = _service(request)
        data = [{"id": m["name"], "object": "model", "created": 0, "owned_by": "vigil", "kind": "vision", **m}
                for m in service.models()]
        if service.llm is not None:
            data.append({"id": service.llm.name, "object": "model", "created": 0, "owned_by": "vigil", "kind": "llm",
                         "max_model_len": service.llm.max_model_len})
        return {"object": "list", "data": data}

    @v1.get("/models/{name}", tags=["models"])
    def get_model(name: str, request: Request) -> dict:
        return _service(request).model(name)

    @v1.post("/models/{name}/load", tags=["models"], dependencies=mutating)
    def load_model(name: str, request: Request, body: LoadIn | None = None) -> dict:
        return _service(request).load_model(name, body.versions if body else None)

    @v1.post("/models/{name}/unload", tags=["models"], dependencies=mutating)
    def unload_model(name: str, request: Request, version: int | None = Query(None, ge=1)) -> dict:
        return _service(request).unload_model(name, version)

    @v1.post("/models/{name}/reload", tags=["models"], dependencies=mutating)
    def reload_model(name: str, request: Request) -> dict:
        return _service(request).reload_model(name)

    @v1.put("/models/{name}/labels/{label}", tags=["models"], dependencies=mutating)
    def set_label(name: str, label: str, body: LabelIn, request: Request) -> dict:
        return _service(request).set_label(name, label, body.version)

    # -- events --
    @v1.get("/events", tags=["events"])
    def events(request: Request, app: str | None = None, stream: str | None = None, type: str | None = None,
               since_ms: float | None = None, until_ms: float | None = None,
               after_id: int = Query(0, ge=0, le=2**62), limit: int = Query(100, ge=1, le=10_000)) -> dict:
        """Filter by app, stream, type and stream-time range; page with `after_id`
        (the previous page's `next_after_id`)."""
        return _service(request).events(app, stream, type, since_ms, until_ms, after_id, limit)

    @v1.get("/overview", tags=["dashboard"])
    def overview(request: Request) -> dict:
        return _service(request).overview()

    @v1.get("/overview/stream", tags=["dashboard"])
    async def overview_stream(request: Request, interval_s: float = Query(1.0, ge=0.2, le=60)) -> StreamingResponse:
        """Server-sent events: the overview every `interval_s` seconds."""
        service = _service(request)

        async def feed():
            while not await request.is_disconnected():
                yield f"data: {json.dumps(service.overview())}\n\n"
                await asyncio.sleep(interval_s)

        return StreamingResponse(feed(), media_type="text/event-stream", headers={"Cache-Control": "no-store"})

    app.include_router(v1)
    app.include_router(llm_router())
    app.include_router(dashboard_router())
    return app
