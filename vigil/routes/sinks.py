"""/v1/sinks: where events go besides storage, and how delivery stands."""

from __future__ import annotations

from fastapi import APIRouter

from vigil.routes.deps import ServiceDep

router = APIRouter(prefix="/v1/sinks", tags=["sinks"])


@router.get("")
def list_sinks(service: ServiceDep) -> list[dict]:
    """Per webhook: events delivered, rejected (a 4xx it means for good) and failed
    tries (tried again), the last event id delivered, the backlog behind it, whether it
    is retrying now and the last error."""
    return service.sinks.status()
