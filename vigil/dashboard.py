"""The per-app SLO dashboard: static pages under /dashboard that read the REST API
(`/v1/overview/stream` for live cards over server-sent events, `/v1/apps/{name}/series`
for charts, `/v1/events` and the events' snapshots for the events page, and each app's
latest annotated frame for a camera's live view). Charts are drawn by plotly.js from the plotly package on PyPI, served from
this server (the machine may be offline)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse

STATIC = Path(__file__).parent / "static"
PAGES = {"/dashboard": "dashboard.html", "/dashboard/apps/{name}": "app.html", "/dashboard/events": "events.html",
         "/dashboard/live/{stream}": "live.html"}


def _plotly_js() -> Path:
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


def _page(file: str):
    def page() -> FileResponse:
        return FileResponse(STATIC / file, media_type="text/html")

    return page


def dashboard_router() -> APIRouter:
    router = APIRouter(include_in_schema=False)

    @router.get("/")
    def root() -> RedirectResponse:
        return RedirectResponse("/dashboard")

    for path, page in PAGES.items():  # each page reads what it shows from the URL and the API
        router.add_api_route(path, _page(page), methods=["GET"], response_class=HTMLResponse)

    @router.get("/static/{file}")
    def static(file: str) -> FileResponse:
        if file == "plotly.min.js":
            return FileResponse(_plotly_js(), media_type="application/javascript")
        path = STATIC / file
        if file not in {p.name for p in STATIC.iterdir()}:
            return FileResponse(STATIC / "missing.txt", status_code=404)
        return FileResponse(path)

    return router
