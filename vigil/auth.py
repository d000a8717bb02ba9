"""The API key check every protected REST route depends on (gRPC checks the same
settings in its servicer)."""

from __future__ import annotations

from fastapi import Request

from vigil.services.errors import Unauthorized


def require_key(request: Request) -> None:
    if not request.app.state.service.settings.authorized(request.headers.get("authorization")):
        raise Unauthorized("missing or invalid API key: send 'Authorization: Bearer KEY'")
