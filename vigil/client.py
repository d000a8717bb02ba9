"""A REST client for the `vigil streams|apps|models|events` commands."""

from __future__ import annotations

import json
from typing import Any

import httpx


class ApiError(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status


class RestClient:
    def __init__(self, url: str, api_key: str | None = None, timeout_s: float = 30.0) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout_s)

    def call(self, method: str, path: str, body: Any = None, params: dict | None = None,
             content_type: str | None = None) -> Any:
        kwargs: dict[str, Any] = {"params": {k: v for k, v in (params or {}).items() if v is not None}}
        if content_type:
            kwargs["content"] = body
            kwargs["headers"] = {"Content-Type": content_type}
        elif body is not None:
            kwargs["json"] = body
        try:
            r = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ApiError(0, f"cannot reach {self.http.base_url}: {exc}") from None
        if r.status_code >= 400:
            try:
                detail = r.json().get("detail")
            except ValueError:
                detail = r.text
            raise ApiError(r.status_code, detail if isinstance(detail, str) else json.dumps(detail))
        return r.json() if r.content and r.headers.get("content-type", "").startswith("application/json") else None
