"""The OpenAPI docs: Swagger UI at ``/docs`` and ReDoc at ``/redoc``, with their scripts, styles
and icon served from the assets bundled in the ``fastapi-offline`` package, so both render with
no internet (FastAPI's defaults load them from a CDN). Public, like the document itself."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse

from modelcompare.service.api.errors import ApiError

router = APIRouter(include_in_schema=False, tags=["docs"])

ASSETS = Path(str(resources.files("fastapi_offline") / "static"))
MEDIA_TYPES = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "redoc.standalone.js": "text/javascript",
    "favicon.png": "image/png",
}
ASSET_PATH = "/docs/assets"


def _root(request: Request) -> str:
    return str(request.scope.get("root_path", "")).rstrip("/")


@router.get("/docs")
async def swagger_ui(request: Request) -> HTMLResponse:
    root = _root(request)
    return get_swagger_ui_html(
        openapi_url=f"{root}{request.app.openapi_url}",
        title=f"{request.app.title} - Swagger UI",
        swagger_js_url=f"{root}{ASSET_PATH}/swagger-ui-bundle.js",
        swagger_css_url=f"{root}{ASSET_PATH}/swagger-ui.css",
        swagger_favicon_url=f"{root}{ASSET_PATH}/favicon.png",
        swagger_ui_parameters={"validatorUrl": None},  # its default is an online validator
    )


@router.get("/redoc")
async def redoc(request: Request) -> HTMLResponse:
    root = _root(request)
    return get_redoc_html(
        openapi_url=f"{root}{request.app.openapi_url}",
        title=f"{request.app.title} - ReDoc",
        redoc_js_url=f"{root}{ASSET_PATH}/redoc.standalone.js",
        redoc_favicon_url=f"{root}{ASSET_PATH}/favicon.png",
        with_google_fonts=False,
    )


@router.get(f"{ASSET_PATH}/{{name}}")
async def docs_asset(name: str) -> FileResponse:
    if name not in MEDIA_TYPES:
        raise ApiError(404, "not_found", f"no docs asset {name!r}", {"name": name})
    return FileResponse(
        ASSETS / name,
        media_type=MEDIA_TYPES[name],
        headers={"Cache-Control": "public, max-age=86400"},
    )
