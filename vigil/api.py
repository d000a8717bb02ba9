"""REST API (FastAPI): `build_app` assembles the routers of vigil/routes/ (one per
resource, thin adapters over the services), the body guard, the error handlers and the
dashboard. OpenAPI at /openapi.json, read at /docs and /redoc (served offline).

Errors: 422 names the field, 404 an unknown name, 409 a conflict, 401 a missing or
wrong key (only when keys are configured: mutating routes and the LLM's), 408 a body
that stalls, 413 a body over the limit, 503 a limit reached (with Retry-After), 507 a
full disk. A client's mistake is never a 500. Bodies are guarded before routing
(vigil/http_guard.py); documents are parsed off the event loop, without YAML aliases.
"""

from __future__ import annotations

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from apps.spec import format_errors
from vigil.api_docs import docs_router
from vigil.auth import require_key
from vigil.dashboard import dashboard_router
from vigil.http_guard import UPLOAD_PATH, BodyGuard, Upload
from vigil.openapi import document_errors, error_body
from vigil.prom import ServiceCollector
from vigil.routes import apps, cluster, config, events, llm, lora, models, openai, sinks, streams, system
from vigil.service import Vigil
from vigil.settings import Settings
from vigil.services.errors import ServiceError
from vigil.storage import StorageFull


async def _service_error(request: Request, exc: ServiceError) -> JSONResponse:
    return JSONResponse(error_body(request.url.path, exc.status, str(exc)), status_code=exc.status,
                        headers=exc.headers)


async def _storage_full(_: Request, exc: StorageFull) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=507)


async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    # FastAPI's locations start with where the field was (body, query, path)
    errors = [{**e, "loc": tuple(e.get("loc", ())[1:]) or ("body",)} for e in exc.errors()]
    return JSONResponse(error_body(request.url.path, 422, format_errors(errors)), status_code=422)


def build_app(service: Vigil, lifespan=None) -> FastAPI:
    app = build_routes(service.settings, lifespan)
    app.state.service = service
    service.engine.metrics.registry.register(ServiceCollector(service))  # read at each scrape of /metrics
    return app


def build_routes(settings: Settings, lifespan=None) -> FastAPI:
    """The API as declared: routes, middleware and error handlers, before a service is
    attached (the OpenAPI schema and the REST reference are made from this alone)."""
    app = FastAPI(title="Vigil", version="0.1.0", lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Video analytics serving: streams, camera apps, models, events, SLO metrics.")
    app.add_exception_handler(ServiceError, _service_error)
    app.add_exception_handler(StorageFull, _storage_full)
    app.add_exception_handler(RequestValidationError, _invalid)
    limits = settings.limits
    app.add_middleware(BodyGuard, max_body_bytes=limits.max_body_bytes, max_json_depth=limits.max_json_depth,
                       chunk_timeout_s=limits.header_timeout_s,
                       upload=Upload(UPLOAD_PATH, limits.max_model_upload_bytes, settings.authorized))
    for router in (system.router, streams.router, apps.router, models.router, events.router, config.router,
                   sinks.router, cluster.router, lora.router):
        app.include_router(router)
    llm_key = [] if settings.open_llm_routes else [Depends(require_key)]  # generating is the costliest request
    app.include_router(openai.router, dependencies=llm_key)
    app.include_router(llm.router, dependencies=llm_key)
    app.include_router(dashboard_router())
    app.include_router(docs_router(app.title, app.openapi_url))
    document_errors(app)
    return app
