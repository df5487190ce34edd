"""The API documentation: /docs and /redoc load every asset from the service itself, the
OpenAPI document's security, errors and WebSocket route, and the API key guarding them."""
from __future__ import annotations

import json
import re
from urllib.parse import urlencode

import pytest

from tests.service.conftest import running

KEY = "docs-key-0123456789"
# Every URL a page loads: the data its script loads them from (service/routes/docs.py).
_URLS = re.compile(r'<script id="docs-urls" type="application/json">(.*?)</script>', re.DOTALL)


def _asset_urls(html: str) -> list[str]:
    return list(json.loads(_URLS.search(html).group(1)).values())


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    with running(tmp_path_factory.mktemp("docs") / "d", api_key=KEY) as client:
        yield client


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_load_every_asset_from_the_service(client, page):
    r = client.get(page)
    assert r.status_code == 200 and "text/html" in r.headers["content-type"]
    urls = _asset_urls(r.text)
    assert "/openapi.json" in urls
    assert any(url.endswith(".js") for url in urls)
    for url in urls:
        assert url.startswith("/") and not url.startswith("//"), f"{page} loads {url}"
        asset = client.get(url)
        assert asset.status_code == 200 and asset.content, url
    assert "http://" not in r.text and "https://" not in r.text   # no CDN, no web fonts


def test_docs_assets_are_only_the_listed_files(client):
    assert client.get("/docs-assets/swagger-ui.css").headers["content-type"].startswith(
        "text/css")
    for name in ("core.py", "..%2f__init__.py", "nothing.js"):
        assert client.get(f"/docs-assets/{name}").status_code == 404


def test_openapi_declares_errors_and_the_websocket_route(client):
    spec = client.get("/openapi.json").json()
    paths = spec["paths"]
    for method in ("get", "delete"):
        assert "404" in paths["/v1/queries/{query_id}"][method]["responses"]
    assert "404" in paths["/v1/queries/{query_id}/results"]["get"]["responses"]
    batch = paths["/v1/batches"]["post"]["responses"]
    assert {"409", "413", "415", "422", "503"} <= set(batch)
    assert {"409", "422"} <= set(paths["/v1/graph"]["put"]["responses"])
    assert "422" in paths["/v1/queries"]["post"]["responses"]
    error = batch["422"]["content"]["application/problem+json"]["schema"]
    assert error == {"$ref": "#/components/schemas/Error"}
    assert "request_id" in spec["components"]["schemas"]["Error"]["properties"]
    assert "/v1/queries/{query_id}/ws" in spec["x-websockets"]
    assert "/v1/queries/{query_id}/ws" in spec["info"]["description"]
    assert "/v1/queries/{query_id}/ws" not in paths
    # Without a key, no security scheme is declared.
    assert "securitySchemes" not in spec["components"] and "security" not in spec
    assert "401" not in batch


def test_with_a_key_docs_and_openapi_need_it_too(keyed):
    for path in ("/docs", "/redoc", "/openapi.json", "/docs-assets/swagger-ui-bundle.js",
                 "/docs/oauth2-redirect"):
        r = keyed.get(path)
        assert r.status_code == 401, path
        assert r.headers["www-authenticate"] == "Bearer"
    for path in ("/healthz", "/readyz"):
        assert keyed.get(path).status_code == 200
    spec = keyed.get("/openapi.json", headers={"Authorization": f"Bearer {KEY}"}).json()
    assert spec["components"]["securitySchemes"]["bearer"] == {
        "type": "http", "scheme": "bearer", "description": spec["components"][
            "securitySchemes"]["bearer"]["description"]}
    assert spec["security"] == [{"bearer": []}]
    assert spec["paths"]["/healthz"]["get"]["security"] == []
    assert "401" in spec["paths"]["/v1/batches"]["post"]["responses"]


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_a_browser_with_the_key_in_the_url_loads_every_asset(keyed, page):
    r = keyed.get(page, params={"access_token": KEY})
    assert r.status_code == 200
    # The page never holds the key (a cached or saved copy would): its script reads the
    # token from the browser's address and adds it to each URL it loads, as below.
    assert KEY not in r.text and KEY not in str(r.headers)
    assert 'new URLSearchParams(location.search).get("access_token")' in r.text
    urls = _asset_urls(r.text)
    assert urls
    for url in urls:
        assert keyed.get(url).status_code == 401, url
        # No Authorization header: as a browser loads it.
        asset = keyed.get(f"{url}?{urlencode({'access_token': KEY})}")
        assert asset.status_code == 200 and asset.content, url


@pytest.mark.parametrize("path", ["/docs", "/redoc", "/openapi.json",
                                  "/docs-assets/swagger-ui.css", "/docs/oauth2-redirect"])
def test_documentation_refuses_unknown_query_parameters(client, path):
    assert client.get(path, params={"access_token": "x"}).status_code == 200  # taken everywhere
    r = client.get(path, params={"theme": "dark"})
    assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json"
    body = r.json()
    assert body["errors"][0]["loc"] == ["query", "theme"]
    assert body["detail"] == "query.theme: unknown query parameter (this route takes " \
                             "access_token)"


def test_without_the_key_documentation_is_401_before_its_parameters_are_read(keyed):
    assert keyed.get("/docs", params={"theme": "dark"}).status_code == 401
    assert keyed.get("/docs", params={"theme": "dark", "access_token": KEY}).status_code == 422
