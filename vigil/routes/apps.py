"""/v1/apps: camera apps (a spec as JSON or YAML), their live changes, SLO metrics,
metric windows and latest annotated frame."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from apps.spec import LIVE_FIELDS, NAME_PATTERN, AppSpec
from vigil.routes.deps import KEY, ServiceDep, parsed_body

router = APIRouter(prefix="/v1/apps", tags=["apps"])


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


SPEC_SCHEMA = _inline(AppSpec.model_json_schema())
SPEC_SCHEMA["required"] = ["name", "source"]  # a served app watches a stream, named as streams are
SPEC_SCHEMA["properties"]["source"] = {"type": "string", "pattern": f"^{NAME_PATTERN.pattern}$",
                                       "description": "the stream this app watches"}
# the body is read by the handler (JSON, or the same spec written as YAML), so OpenAPI is told here
SPEC_BODY = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": SPEC_SCHEMA},
    "application/yaml": {"schema": SPEC_SCHEMA}}}}
PATCH_BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "properties": {f: SPEC_SCHEMA["properties"][f] for f in LIVE_FIELDS},
    "additionalProperties": False}}}}}


@router.post("", status_code=201, dependencies=KEY, openapi_extra=SPEC_BODY)
async def add_app(request: Request, service: ServiceDep) -> dict:
    return service.apps.add(await parsed_body(request, service.settings.limits.max_json_depth))


@router.get("")
def list_apps(service: ServiceDep) -> list[dict]:
    return service.apps.list()


@router.get("/{name}")
def get_app(name: str, service: ServiceDep) -> dict:
    return service.apps.get(name)


@router.patch("/{name}", dependencies=KEY, openapi_extra=PATCH_BODY)
async def patch_app(name: str, request: Request, service: ServiceDep) -> dict:
    return service.apps.patch(name, await parsed_body(request, service.settings.limits.max_json_depth))


@router.delete("/{name}", status_code=204, dependencies=KEY)
def delete_app(name: str, service: ServiceDep) -> Response:
    service.apps.delete(name)
    return Response(status_code=204)


@router.get("/{name}/metrics")
def app_metrics(name: str, service: ServiceDep) -> dict:
    return service.apps.metrics(name)


@router.get("/{name}/series")
def app_series(name: str, service: ServiceDep, since_s: float = Query(3600.0, gt=0, le=86400)) -> list[dict]:
    return service.apps.series(name, since_s)


@router.get("/{name}/frame.jpg", response_class=Response)
def app_frame(name: str, service: ServiceDep) -> Response:
    return Response(service.apps.snapshot(name), media_type="image/jpeg", headers={"Cache-Control": "no-store"})
