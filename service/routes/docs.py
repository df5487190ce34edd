"""Owns the API documentation routes: /openapi.json, Swagger UI at /docs and ReDoc at /redoc,
with their JavaScript, CSS and icon served by the service itself (no CDN, works offline).

The assets are the Swagger UI and ReDoc bundles the `fastapi-offline` package ships (MIT;
Swagger UI and ReDoc themselves are Apache-2.0 and MIT).  With an API key set these routes
need it like every other but /healthz and /readyz; a browser, which cannot add the
Authorization header to a page, its scripts or its fetch of /openapi.json, opens
`/docs?access_token=<key>` and the page's script passes the token on to each URL it loads
(the server never writes a key into a page: see _page).
"""
from __future__ import annotations

import html
import json
from importlib import resources
from string import Template

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.openapi.docs import get_swagger_ui_oauth2_redirect_html
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
    """`path` under the app's root path."""
    return f"{request.scope.get('root_path', '')}{path}"


# A documentation page.  Its URLs are data (the `docs-urls` block, JSON); its script adds
# the page's own access_token, read from the browser's location, to each before loading
# it.  Writing the token into the page instead would hand the key to every cache, proxy
# and saved copy of the page.  `no-referrer`: the page's address (which holds the token)
# goes to no site it links to.
_PAGE = Template("""<!DOCTYPE html>
<html>
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>$title</title>
<style>body { margin: 0; padding: 0; }</style>
</head>
<body>
<noscript>This page needs JavaScript; /openapi.json is the OpenAPI document itself.</noscript>
<div id="docs"></div>
<script id="docs-urls" type="application/json">$urls</script>
<script>
const token = new URLSearchParams(location.search).get("access_token");
const withToken = (url) => token ? url + "?access_token=" + encodeURIComponent(token) : url;
const urls = JSON.parse(document.getElementById("docs-urls").textContent);
function add(parent, tag, attributes) {
  const node = Object.assign(document.createElement(tag), attributes);
  parent.appendChild(node);
  return node;
}
add(document.head, "link", {rel: "icon", href: withToken(urls.favicon)});
if (urls.css) add(document.head, "link", {rel: "stylesheet", href: withToken(urls.css)});
add(document.body, "script", {src: withToken(urls.script), onload: () => { $start }});
</script>
</body>
</html>
""")

# Swagger UI as FastAPI configures it; with a token in the page's address, "Authorize"
# starts filled in with it.
_SWAGGER_START = """
    const ui = SwaggerUIBundle({
      url: withToken(urls.openapi), dom_id: "#docs", layout: "BaseLayout", deepLinking: true,
      showExtensions: true, showCommonExtensions: true,
      oauth2RedirectUrl: location.origin + urls.oauth2_redirect,
      presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
      onComplete: () => { if (token) ui.preauthorizeApiKey("bearer", token); },
    });
  """
_REDOC_START = """
    Redoc.init(withToken(urls.openapi), {}, document.getElementById("docs"));
  """


def _page(title: str, urls: dict[str, str], start: str) -> HTMLResponse:
    # "<" escaped so that no URL can close the script element.
    data = json.dumps(urls).replace("<", "\\u003c")
    return HTMLResponse(_PAGE.substitute(title=html.escape(title), urls=data, start=start))


@router.get("/openapi.json")
async def openapi_json(request: Request) -> JSONResponse:
    app = request.app
    return JSONResponse(openapi_document(app, app.state.settings.api_key is not None))


@router.get("/docs")
async def swagger_ui(request: Request) -> HTMLResponse:
    return _page(f"{request.app.title} - Swagger UI", {
        "openapi": _url(request, "/openapi.json"),
        "script": _url(request, f"{ASSETS_PATH}/swagger-ui-bundle.js"),
        "css": _url(request, f"{ASSETS_PATH}/swagger-ui.css"),
        "favicon": _url(request, f"{ASSETS_PATH}/favicon.png"),
        "oauth2_redirect": _url(request, OAUTH2_REDIRECT)}, _SWAGGER_START)


@router.get(OAUTH2_REDIRECT)
async def swagger_ui_redirect() -> HTMLResponse:
    return get_swagger_ui_oauth2_redirect_html()


@router.get("/redoc")
async def redoc(request: Request) -> HTMLResponse:
    return _page(f"{request.app.title} - ReDoc", {
        "openapi": _url(request, "/openapi.json"),
        "script": _url(request, f"{ASSETS_PATH}/redoc.standalone.js"),
        "favicon": _url(request, f"{ASSETS_PATH}/favicon.png")}, _REDOC_START)


@router.get(ASSETS_PATH + "/{name}")
async def asset(name: str) -> FileResponse:
    media = ASSETS.get(name)
    if media is None:
        raise HTTPException(404, f"no documentation asset {name!r}")
    return FileResponse(str(_ASSET_DIR / name), media_type=media,
                        headers={"Cache-Control": "public, max-age=86400"})
