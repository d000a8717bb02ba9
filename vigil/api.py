"""REST API (FastAPI): thin routers over `vigil.service`. OpenAPI at /docs.

Errors: 422 names the field, 404 an unknown name, 409 a conflict, 401 a missing or
wrong key (only when keys are configured: mutating routes and the LLM's), 408 a body
that stalls, 413 a body over the limit, 503 a limit reached (with Retry-After), 507 a
full disk. A client's mistake is never a 500. Bodies are guarded before routing
(vigil/http_guard.py); documents are parsed off the event loop, without YAML aliases.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from prometheus_client import generate_latest
from pydantic import BaseModel, ConfigDict, Field, model_validator
from starlette.concurrency import run_in_threadpool

from apps.documents import DocumentError, load_json, load_yaml
from apps.events import EVENT_TYPES
from apps.spec import LIVE_FIELDS, NAME_PATTERN, AppSpec, format_errors
from streams.live import StreamOptions
from vigil.auth import require_key
from vigil.dashboard import dashboard_router
from vigil.http_guard import UPLOAD_PATH, BodyGuard, Upload
from vigil.llm_api import llm_router
from vigil.openapi import document_errors
from vigil.prom import ServiceCollector
from vigil.service import Invalid, ServiceError, TooLarge, Vigil
from vigil.storage import MAX_EVENT_ID, StorageFull

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


class LoadIn(BaseModel):
    versions: list[int] | None = Field(None, max_length=64)


class LabelIn(BaseModel):
    version: int = Field(ge=1, le=2**31)


async def _body(request: Request, max_depth: int) -> Any:
    """JSON, or YAML with Content-Type application/yaml; parsed on a worker thread."""
    raw = await request.body()
    kind = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    parse = load_yaml if kind in ("application/yaml", "application/x-yaml", "text/yaml") else load_json
    try:
        return await run_in_threadpool(parse, raw, max_depth)
    except DocumentError as exc:
        raise Invalid(f"body: {exc}") from None


def _inline(schema: dict) -> dict:
    """A model's JSON schema with its `$defs` written in place (an OpenAPI operation
    cannot point into a schema's own `$defs`)."""
    defs = schema.pop("$defs", {})

    def walk(node):
        if isinstance(node, dict):
            if "$ref" in node:
                return walk(dict(defs[node["$ref"].rsplit("/", 1)[1]]))
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(schema)


def _service(request: Request) -> Vigil:
    return request.app.state.service


def build_app(service: Vigil, lifespan=None) -> FastAPI:
    app = FastAPI(title="Vigil", version="0.1.0", lifespan=lifespan,
                  description="Video analytics serving: streams, camera apps, models, events, SLO metrics.")
    app.state.service = service
    registry = service.engine.metrics.registry
    registry.register(ServiceCollector(service))
    limits = service.settings.limits

    @app.exception_handler(ServiceError)
    async def _service_error(_: Request, exc: ServiceError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=exc.status, headers=exc.headers)

    @app.exception_handler(StorageFull)
    async def _full(_: Request, exc: StorageFull) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=507)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's locations start with where the field was (body, query, path)
        errors = [{**e, "loc": tuple(e.get("loc", ())[1:]) or ("body",)} for e in exc.errors()]
        return JSONResponse({"detail": format_errors(errors)}, status_code=422)

    app.add_middleware(BodyGuard, max_body_bytes=limits.max_body_bytes, max_json_depth=limits.max_json_depth,
                       chunk_timeout_s=limits.header_timeout_s,
                       upload=Upload(UPLOAD_PATH, limits.max_model_upload_bytes, service.settings.authorized))
    mutating = [Depends(require_key)]
    v1 = APIRouter(prefix="/v1")

    @app.get("/healthz", tags=["system"])
    async def healthz() -> dict:  # on the event loop: no worker thread needed to say it is alive
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
        return _service(request).add_stream(body.name, body.url, body.options)

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
    spec_schema = _inline(AppSpec.model_json_schema())
    spec_schema["required"] = ["name", "source"]  # a served app watches a stream, named as streams are
    spec_schema["properties"]["source"] = {"type": "string", "pattern": f"^{NAME_PATTERN.pattern}$",
                                           "description": "the stream this app watches"}
    app_body = {"requestBody": {"required": True, "content": {
        "application/json": {"schema": spec_schema},
        "application/yaml": {"schema": spec_schema}}}}  # the same spec, written as YAML

    @v1.post("/apps", status_code=201, tags=["apps"], dependencies=mutating, openapi_extra=app_body)
    async def add_app(request: Request) -> dict:
        return _service(request).add_app(await _body(request, limits.max_json_depth))

    @v1.get("/apps", tags=["apps"])
    def list_apps(request: Request) -> list[dict]:
        return _service(request).list_apps()

    @v1.get("/apps/{name}", tags=["apps"])
    def get_app(name: str, request: Request) -> dict:
        return _service(request).app(name)

    patch_body = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
        "type": "object", "properties": {f: spec_schema["properties"][f] for f in LIVE_FIELDS},
        "additionalProperties": False}}}}}

    @v1.patch("/apps/{name}", tags=["apps"], dependencies=mutating, openapi_extra=patch_body)
    async def patch_app(name: str, request: Request) -> dict:
        return _service(request).patch_app(name, await _body(request, limits.max_json_depth))

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

    upload_body = {"requestBody": {"required": True, "content": {"application/octet-stream": {"schema": {
        "type": "string", "format": "binary",
        "description": "a .tar, .tar.gz or .zip of a version folder (model.yaml and the files it names)"}}}}}

    @v1.post("/models/{name}/versions", status_code=201, tags=["models"], dependencies=mutating,
             openapi_extra=upload_body)
    async def add_model_version(name: str, request: Request) -> dict:
        """Upload a version folder as an archive: it becomes the model's next version once it
        builds and runs (a new model when the name is new); at most limits.max_model_upload_bytes."""
        import tempfile

        service = _service(request)
        limit = limits.max_model_upload_bytes
        with tempfile.NamedTemporaryFile(dir=service.repository.root, prefix=".upload-", suffix=".archive") as f:
            size = 0
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise TooLarge(f"body: over {limit} bytes (limits.max_model_upload_bytes)")
                await run_in_threadpool(f.write, chunk)
            await run_in_threadpool(f.flush)
            return await run_in_threadpool(service.add_model_version, name, Path(f.name))

    @v1.put("/models/{name}/labels/{label}", tags=["models"], dependencies=mutating)
    def set_label(name: str, label: str, body: LabelIn, request: Request) -> dict:
        return _service(request).set_label(name, label, body.version)

    # -- events --
    @v1.get("/events", tags=["events"])
    def events(request: Request, app: str | None = Query(None, max_length=64),
               stream: str | None = Query(None, max_length=64),
               type: str | None = Query(None, json_schema_extra={"enum": list(EVENT_TYPES)}),
               since_ms: float | None = Query(None, ge=-1e15, le=1e15),
               until_ms: float | None = Query(None, ge=-1e15, le=1e15),
               after_id: int = Query(0, ge=0, le=MAX_EVENT_ID), limit: int = Query(100, ge=1, le=10_000)) -> dict:
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
    app.include_router(llm_router(open_routes=service.settings.open_llm_routes))
    app.include_router(dashboard_router())
    document_errors(app)
    return app
