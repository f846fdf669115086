"""The live dashboard: the page at ``/`` and its assets under ``/static/`` (public: they hold no
data; the page reads the API with the user's key). Plotly's bundle is served from the installed
``plotly`` package."""

from __future__ import annotations

from importlib import resources
from importlib.util import find_spec
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

from modelcompare.service.api.errors import ApiError

router = APIRouter(include_in_schema=False, tags=["dashboard"])

STATIC = Path(str(resources.files("modelcompare.service") / "static"))
OWN_ASSETS = {"dashboard.js": "text/javascript", "dashboard.css": "text/css"}
NO_CACHE = {"Cache-Control": "no-cache"}


def _plotly_bundle() -> Path:
    """plotly.min.js of the installed ``plotly`` package (found without importing plotly)."""
    spec = find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the dashboard needs the plotly package: pip install plotly")
    return Path(spec.submodule_search_locations[0]) / "package_data" / "plotly.min.js"


PLOTLY = _plotly_bundle()


@router.get("/")
async def dashboard_page() -> FileResponse:
    return FileResponse(STATIC / "index.html", media_type="text/html", headers=NO_CACHE)


@router.get("/static/plotly.min.js")
async def plotly_bundle() -> FileResponse:
    return FileResponse(PLOTLY, media_type="text/javascript",
                        headers={"Cache-Control": "public, max-age=86400"})


@router.get("/static/{name}")
async def dashboard_asset(name: str) -> FileResponse:
    if name not in OWN_ASSETS:
        raise ApiError(404, "not_found", f"no asset {name!r}", {"name": name})
    return FileResponse(STATIC / name, media_type=OWN_ASSETS[name], headers=NO_CACHE)
