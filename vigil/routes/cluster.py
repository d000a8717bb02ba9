"""/v1/cluster: where the engine runs when `vigil serve --cluster` put it on a Ray
cluster: the global scheduler's plan (devices, sessions, rates, duty cycles, why each
plan was made, lost backends) and what each backend reports."""

from __future__ import annotations

from fastapi import APIRouter

from vigil.routes.deps import ServiceDep

router = APIRouter(prefix="/v1/cluster", tags=["cluster"])


@router.get("")
def cluster_plan(service: ServiceDep) -> dict:
    """404 when the engine runs in the server's own process."""
    return service.cluster_plan()  # a plain def: its remote calls wait on a worker thread
