"""Owns the API documentation routes: /openapi.json, Swagger UI at /docs and ReDoc at /redoc,
with their JavaScript, CSS and icon served by the service itself (no CDN, works offline).

The assets are the Swagger UI and ReDoc bundles the `fastapi-offline` package ships (MIT;
Swagger UI and ReDoc themselves are Apache-2.0 and MIT).  With an API key set these routes
need it like every other but /healthz and /readyz; a browser, which cannot add the
Authorization header to a page, its scripts or its fetch of /openapi.json, opens
`/docs?access_token=<key>` and the page passes the token on to each URL it loads.
"""
from __future__ import annotations

from importlib import resources
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.openapi.docs import (get_redoc_html, get_swagger_ui_html,
                                  get_swagger_ui_oauth2_redirect_html)
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse

from service.deps import reject_unknown_parameters
from service.openapi import openapi_document

# The only query parameter these routes take is access_token (taken everywhere, above).
router = APIRouter(include_in_schema=False, dependencies=[Depends(reject_unknown_parameters)])

ASSETS_PATH = "/docs-assets"
_ASSET_DIR = resources.files("fastapi_offline") / "static"
# The only files served, by name (nothing else under the package is reachable).
ASSETS = {name: media for name, media in (
    ("swagger-ui-bundle.js", "text/javascript"), ("swagger-ui.css", "text/css"),
    ("redoc.standalone.js", "text/javascript"), ("favicon.png", "image/png"))}
OAUTH2_REDIRECT = "/docs/oauth2-redirect"


def _url(request: Request, path: str) -> str:
    """`path` under the app's root path, carrying the page's own access_token if it had one."""
    token = request.query_params.get("access_token")
    query = "?" + urlencode({"access_token": token}) if token else ""
    return f"{request.scope.get('root_path', '')}{path}{query}"


@router.get("/openapi.json")
async def openapi_json(request: Request) -> JSONResponse:
    app = request.app
    return JSONResponse(openapi_document(app, app.state.settings.api_key is not None))


@router.get("/docs")
async def swagger_ui(request: Request) -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url=_url(request, "/openapi.json"), title=f"{request.app.title} - Swagger UI",
        swagger_js_url=_url(request, f"{ASSETS_PATH}/swagger-ui-bundle.js"),
        swagger_css_url=_url(request, f"{ASSETS_PATH}/swagger-ui.css"),
        swagger_favicon_url=_url(request, f"{ASSETS_PATH}/favicon.png"),
        oauth2_redirect_url=OAUTH2_REDIRECT)


@router.get(OAUTH2_REDIRECT)
async def swagger_ui_redirect() -> HTMLResponse:
    return get_swagger_ui_oauth2_redirect_html()


@router.get("/redoc")
async def redoc(request: Request) -> HTMLResponse:
    return get_redoc_html(
        openapi_url=_url(request, "/openapi.json"), title=f"{request.app.title} - ReDoc",
        redoc_js_url=_url(request, f"{ASSETS_PATH}/redoc.standalone.js"),
        redoc_favicon_url=_url(request, f"{ASSETS_PATH}/favicon.png"), with_google_fonts=False)


@router.get(ASSETS_PATH + "/{name}")
async def asset(name: str) -> FileResponse:
    media = ASSETS.get(name)
    if media is None:
        raise HTTPException(404, f"no documentation asset {name!r}")
    return FileResponse(str(_ASSET_DIR / name), media_type=media,
                        headers={"Cache-Control": "public, max-age=86400"})
