"""Owns the OpenAPI document: FastAPI's, plus the bodies routes read themselves, the bearer
scheme, the error answers every route can give and the WebSocket routes FastAPI cannot list."""
from __future__ import annotations

import inspect

from fastapi import FastAPI
from fastapi.routing import APIWebSocketRoute

from service.schemas import BatchCreate, GraphLoad, QueryCreate

# The error body every 4xx/5xx shares (service/main.py's handlers).
ERROR_SCHEMA = {
    "title": "Error", "type": "object", "required": ["detail"],
    "properties": {
        "detail": {"description": "what was wrong: a message naming the field, line or "
                                  "setting, or for schema errors a list of "
                                  "{loc, msg, type}"},
        "request_id": {"type": ["string", "null"],
                       "description": "the request's X-Request-ID (as in the logs)"}}}
_ERROR_REF = {"$ref": "#/components/schemas/Error"}
# Answers no route declares itself: (method, path) or (None: any method, path prefix),
# status, why.
_ERRORS = (
    (None, "/v1/queries/{query_id}", 404, "No such query"),
    ("post", "/v1/queries", 422, "Invalid pattern or options (nothing registered)"),
    ("post", "/v1/queries:validate", 422, "Invalid pattern"),
    ("post", "/v1/batches", 409, "Idempotency-Key reused for another request"),
    ("post", "/v1/batches", 415, "Unsupported Content-Type"),
    ("post", "/v1/batches", 422, "Invalid batch (nothing applied)"),
    ("put", "/v1/graph", 409, "The graph is not empty"),
    ("put", "/v1/graph", 413, "Body above max_request_bytes"),
    ("put", "/v1/graph", 415, "Unsupported Content-Type"),
    ("put", "/v1/graph", 422, "Invalid graph (nothing loaded)"),
    (None, "/v1/", 503, "Not available: still recovering, or could not be made durable "
                        "(nothing changed)"),
)
# Routes anyone may call, with or without the API key.
OPEN_PATHS = frozenset(("/healthz", "/readyz"))


def openapi_document(app: FastAPI, secured: bool) -> dict:
    """The app's OpenAPI document, built once.  `secured`: an API key is configured (the
    bearer scheme is declared and every operation but OPEN_PATHS requires it)."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    schema = FastAPI.openapi(app)
    components = schema.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for model in (QueryCreate, BatchCreate, GraphLoad):
        body = model.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, sub in body.pop("$defs", {}).items():
            schemas.setdefault(name, sub)
        schemas[model.__name__] = body
    schemas["Error"] = ERROR_SCHEMA
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            _declare_errors(path, method, operation["responses"])
    if secured:
        components["securitySchemes"] = {"bearer": {
            "type": "http", "scheme": "bearer",
            "description": "the server's MOTIFSTREAM_API_KEY (WebSockets may pass "
                           "?access_token= instead)"}}
        schema["security"] = [{"bearer": []}]
        for path, operations in schema["paths"].items():
            for operation in operations.values():
                if path in OPEN_PATHS:
                    operation["security"] = []
                else:
                    operation["responses"].setdefault(
                        "401", {"description": "Missing or wrong API key",
                                "content": {"application/json": {"schema": _ERROR_REF}}})
    sockets = _websockets(app)
    schema["x-websockets"] = sockets
    schema["info"]["description"] += "\n\nWebSocket routes (not listed among the paths): " + \
        "; ".join(f"`{path}`: {entry['summary'].rstrip('.')}"
                  for path, entry in sockets.items()) + "."
    app.openapi_schema = schema
    return schema


def _declare_errors(path: str, method: str, responses: dict) -> None:
    for wanted_method, where, status, why in _ERRORS:
        # An entry for any method names a path prefix; one for a method, a path.
        if (path.startswith(where) if wanted_method is None
                else method == wanted_method and path == where):
            entry = responses.setdefault(str(status), {"description": why})
            entry.setdefault("content", {"application/json": {"schema": _ERROR_REF}})


def _websockets(app: FastAPI) -> dict:
    """Every WebSocket route, as an `x-websockets` entry: its summary and description (the
    handler's docstring) and its path parameters."""
    found = {}
    for route, path in _routes(app):
        if isinstance(route, APIWebSocketRoute) and path is not None:
            doc = inspect.getdoc(route.endpoint) or ""
            summary, _, description = doc.partition("\n\n")
            found[path] = {
                "summary": summary.replace("\n", " "),
                "description": description,
                "parameters": [{"name": name, "in": "path", "required": True}
                               for name in route.param_convertors]}
    return found


def _routes(app: FastAPI) -> list[tuple[object, str | None]]:
    """Every route of the app with its full path.  FastAPI 0.16x keeps an included router
    as one entry of app.routes, its routes reached through iter_route_contexts; before,
    app.routes listed them all."""
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:
        return [(route, getattr(route, "path", None)) for route in app.routes]
    return [(context.original_route, context.path) for context in iter_route_contexts(app.routes)]
