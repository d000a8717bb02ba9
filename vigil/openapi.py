"""The OpenAPI document says what the server does: every error is `{"detail": "..."}`
(one line per problem, naming the field; on the OpenAI routes also as OpenAI's
`error`), with the statuses a route can answer, and a 405 lists every method of the
path in `Allow`."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.routing import Match

from vigil.auth import require_key

ERROR = {"type": "object", "required": ["detail"], "title": "Error", "properties": {
    "detail": {"type": "string"},
    "error": {"type": "object", "description": "on the OpenAI routes: the same, in OpenAI's shape",
              "properties": {"message": {"type": "string"}, "type": {"type": "string"}, "code": {"type": "integer"}}}}}
# routes an OpenAI client calls: their errors also come in OpenAI's shape, which its exceptions read
OPENAI_PATHS = frozenset({"/v1/completions", "/v1/chat/completions", "/v1/load_lora_adapter",
                          "/v1/unload_lora_adapter"})


def error_body(path: str, status: int, message: str) -> dict:
    body = {"detail": message}
    if path in OPENAI_PATHS:
        kind = "invalid_request_error" if status < 500 else "server_error"
        body["error"] = {"message": message, "type": kind, "code": status}
    return body
# statuses any route may answer (the guard in front of every route, a full disk, a bug)
COMMON = {400: "malformed body", 404: "no such thing", 408: "the body stalled", 409: "conflict or a limit reached",
          413: "body over limits.max_body_bytes", 422: "invalid field: the message names it",
          500: "server failure", 503: "busy or not ready: retry (Retry-After)", 507: "the disk is full"}
PROTECTED = {401: "missing or invalid API key", 403: "not allowed by the server's limits"}


def document_errors(app: FastAPI) -> None:
    def openapi() -> dict:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            schemas = doc.setdefault("components", {}).setdefault("schemas", {})
            schemas.pop("ValidationError", None)
            schemas["HTTPValidationError"] = ERROR  # what the 422s refer to: our one error shape
            schemas["Error"] = ERROR
            protected = {(r.path, m) for r in app.routes if _needs_key(r) for m in r.methods}
            for path, item in doc.get("paths", {}).items():
                for method, operation in item.items():
                    statuses = {**COMMON, **(PROTECTED if (path, method.upper()) in protected else {})}
                    responses = operation.setdefault("responses", {})
                    for status, text in statuses.items():
                        responses.setdefault(str(status), {"description": text, "content": {
                            "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}})
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi

    @app.exception_handler(405)
    async def _method_not_allowed(request: Request, exc: HTTPException) -> JSONResponse:
        methods = sorted({m for r in app.routes if r.matches(request.scope)[0] != Match.NONE
                          for m in getattr(r, "methods", ())})
        return JSONResponse({"detail": f"{request.method} is not a method of {request.url.path}; "
                                       f"it has {', '.join(methods)}"}, status_code=405,
                            headers={"Allow": ", ".join(methods)})


def _needs_key(route) -> bool:
    dependant = getattr(route, "dependant", None)
    return dependant is not None and any(d.call is require_key for d in dependant.dependencies)
