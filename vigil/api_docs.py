"""The API's own pages, /docs (Swagger UI) and /redoc, with their scripts and styles
served by this server from the fastapi-offline package: FastAPI's defaults load them
from a CDN, and a camera server is often offline."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from fastapi import APIRouter, HTTPException
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import FileResponse, HTMLResponse, Response

ASSETS_URL = "/static/api-docs"
OAUTH2_REDIRECT = "/docs/oauth2-redirect"
REDOC = "redoc.standalone.js"
# ReDoc's bundle shows its maker's logo from their CDN: the page asks for nothing elsewhere
REDOC_LOGO = b"https://cdn.redoc.ly/redoc/logo-mini.svg"


def _assets() -> Path:
    import fastapi_offline

    return Path(fastapi_offline.__file__).parent / "static"


@lru_cache(maxsize=1)
def _redoc_js() -> bytes:
    return (_assets() / REDOC).read_bytes().replace(REDOC_LOGO, f"{ASSETS_URL}/favicon.png".encode())


def docs_router(title: str, openapi_url: str = "/openapi.json") -> APIRouter:
    router = APIRouter(include_in_schema=False)

    @router.get("/docs")
    def swagger() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url=openapi_url, title=f"{title} - Swagger UI",
                                   oauth2_redirect_url=OAUTH2_REDIRECT,
                                   swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
                                   swagger_favicon_url=f"{ASSETS_URL}/favicon.png")

    @router.get(OAUTH2_REDIRECT)
    def oauth2_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @router.get("/redoc")
    def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url=openapi_url, title=f"{title} - ReDoc",
                              redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js",
                              redoc_favicon_url=f"{ASSETS_URL}/favicon.png", with_google_fonts=False)

    assets = {p.name: p for p in _assets().iterdir()}  # the names that exist: no path from the URL is opened

    @router.get(ASSETS_URL + "/{file}")
    def asset(file: str) -> Response:
        if file not in assets:
            raise HTTPException(404, f"no file {file!r} of the API's pages")
        if file == REDOC:
            return Response(_redoc_js(), media_type="text/javascript")
        return FileResponse(assets[file])

    return router
