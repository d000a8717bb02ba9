"""Liveness, readiness and Prometheus metrics (outside /v1, for probes and scrapers)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import generate_latest

from vigil.routes.deps import ServiceDep

router = APIRouter(tags=["system"])


@router.get("/healthz")
async def healthz() -> dict:  # on the event loop: no worker thread needed to say it is alive
    return {"status": "ok"}


@router.get("/readyz")
def readyz(service: ServiceDep) -> JSONResponse:
    ready = service.ready
    return JSONResponse({"ready": ready}, status_code=200 if ready else 503)


@router.get("/metrics", response_class=PlainTextResponse)
def metrics(service: ServiceDep) -> Response:
    return Response(generate_latest(service.engine.metrics.registry), media_type="text/plain; version=0.0.4")
