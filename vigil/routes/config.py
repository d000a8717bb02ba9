"""/v1/config/reload: read the config file again and apply its cameras."""

from __future__ import annotations

from fastapi import APIRouter

from vigil.routes.deps import KEY, ServiceDep

router = APIRouter(prefix="/v1/config", tags=["config"])


@router.post("/reload", dependencies=KEY)
def reload_config(service: ServiceDep) -> dict:
    """The cameras (and their apps) of the config file as it is now: what was added,
    changed, removed or left as it was, and each problem, in the API's words. Settings
    other than `cameras` take a restart. SIGHUP does the same."""
    return service.reload_config()
