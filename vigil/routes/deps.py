"""What every router shares: the service (`ServiceDep`), the API key on mutating routes
(`KEY`), and bodies that may be JSON or YAML."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from apps.documents import DocumentError, load_json, load_yaml
from vigil.auth import require_key
from vigil.service import Vigil
from vigil.services.errors import Invalid

YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml")


async def get_service(request: Request) -> Vigil:
    # async: resolved on the event loop, so routes that never take a worker thread still don't
    return request.app.state.service


ServiceDep = Annotated[Vigil, Depends(get_service)]
KEY = [Depends(require_key)]  # on routes that change something (checked only when keys are configured)


async def parsed_body(request: Request, max_depth: int) -> Any:
    """JSON, or YAML with Content-Type application/yaml; parsed on a worker thread."""
    raw = await request.body()
    kind = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    parse = load_yaml if kind in YAML_TYPES else load_json
    try:
        return await run_in_threadpool(parse, raw, max_depth)
    except DocumentError as exc:
        raise Invalid(f"body: {exc}") from None
