"""Owns the OpenAPI document: FastAPI's, plus the bodies routes read themselves, the bearer
scheme, the error answers every route can give and the WebSocket routes FastAPI cannot list."""
from __future__ import annotations

import inspect

from fastapi import FastAPI
from fastapi.routing import APIWebSocketRoute

from service.schemas import (QUERY_TEXT_SCHEMA, BatchCreate, GraphLoad, QueryCreate,
                             ReadinessPending, query_text_schema)

# The error body every 4xx/5xx shares (service/main.py's _error_body): an RFC 9457
# problem, as application/problem+json.
PROBLEM_JSON = "application/problem+json"
ERROR_SCHEMA = {
    "title": "Error", "type": "object",
    "required": ["type", "title", "status", "detail", "code"],
    "description": "An RFC 9457 problem detail (application/problem+json).",
    "properties": {
        "type": {"type": "string", "format": "uri-reference", "const": "about:blank",
                 "description": "about:blank: the status says what kind of error it is "
                                "(`code` tells the cases apart)"},
        "title": {"type": "string", "description": "the status's phrase, e.g. Conflict"},
        "status": {"type": "integer", "description": "the HTTP status, repeated"},
        "detail": {"type": "string",
                   "description": "what was wrong: a message naming the field, line, "
                                  "parameter or setting (for schema errors, the first of "
                                  "`errors`)"},
        "instance": {"type": "string", "format": "uri-reference",
                     "description": "the request's path"},
        "code": {"type": "string", "description": "a stable name for the case: "
                 "invalid_input, idempotency_key_reused, idempotency_key_in_flight, "
                 "conflict, not_found, results_gone, payload_too_large, "
                 "unsupported_media_type, unauthorized, unavailable, internal_error, ..."},
        "request_id": {"type": ["string", "null"],
                       "description": "the request's X-Request-ID (as in the logs)"},
        "errors": {"type": "array", "description": "schema errors only: every one, as "
                   "{loc, msg, type} (`loc` e.g. [\"body\", \"insert_edges\", 3, 1] or "
                   "[\"query\", \"limit\"])",
                   "items": {"type": "object", "required": ["loc", "msg", "type"],
                             "properties": {"loc": {"type": "array"},
                                            "msg": {"type": "string"},
                                            "type": {"type": "string"}}}},
        "earliest": {"type": "integer", "description": "410 only: the earliest cursor "
                     "still served"}}}
_ERROR_REF = {"$ref": "#/components/schemas/Error"}
# Answers no route declares itself: (method, path) or (None: any method, path prefix),
# status, why.
_ERRORS = (
    (None, "/v1/queries/{query_id}", 404, "No such query"),
    ("post", "/v1/queries", 422, "Invalid pattern or options (nothing registered)"),
    ("post", "/v1/queries:validate", 422, "Invalid pattern"),
    ("post", "/v1/batches", 409, "A request with this Idempotency-Key is still being "
                                 "applied (retry later)"),
    ("post", "/v1/batches", 415, "Unsupported Content-Type"),
    ("post", "/v1/batches", 422, "Invalid or empty batch, or an Idempotency-Key used before "
                                 "for another body (nothing applied)"),
    ("put", "/v1/graph", 409, "The graph is not empty"),
    ("put", "/v1/graph", 413, "Body above max_request_bytes"),
    ("put", "/v1/graph", 415, "Unsupported Content-Type"),
    ("put", "/v1/graph", 422, "Invalid graph (nothing loaded)"),
    (None, "/v1/", 422, "Invalid input, or an unknown query parameter"),
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
    for model in (QueryCreate, BatchCreate, GraphLoad, ReadinessPending):
        body = model.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, sub in body.pop("$defs", {}).items():
            schemas.setdefault(name, sub)
        schemas[model.__name__] = body
    schemas["Error"] = ERROR_SCHEMA
    _bound_pattern_size(schema, app.state.settings.max_query_vertices)
    # FastAPI's own body for its 422s, replaced by Error everywhere.
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            _declare_errors(path, method, operation["responses"])
            _streams_by_item(operation["responses"])
            _parameters_without_null(operation.get("parameters", ()))
    _link_queries(schema["paths"])
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
                                "content": {PROBLEM_JSON: {"schema": _ERROR_REF}}})
    sockets = _websockets(app)
    schema["x-websockets"] = sockets
    schema["info"]["description"] += "\n\nWebSocket routes (not listed among the paths): " + \
        "; ".join(f"`{path}`: {entry['summary'].rstrip('.')}"
                  for path, entry in sockets.items()) + "."
    app.openapi_schema = schema
    return schema


def _declare_errors(path: str, method: str, responses: dict) -> None:
    """Add the _ERRORS entries that match the operation, then give every 4xx/5xx answer
    it declares (its own, FastAPI's 422 included) the one body they all have: Error, as
    application/problem+json."""
    for wanted_method, where, status, why in _ERRORS:
        # An entry for any method names a path prefix; one for a method, a path.
        if (path.startswith(where) if wanted_method is None
                else method == wanted_method and path == where):
            responses.setdefault(str(status), {"description": why})
    for status, entry in responses.items():
        # FastAPI's own 422 (HTTPValidationError) becomes Error too; a route that declares
        # its own body for an error (/readyz's 503) keeps it.
        content = entry.get("content")
        if status[0] in "45" and (content is None or "HTTPValidationError" in str(content)):
            entry["content"] = {PROBLEM_JSON: {"schema": _ERROR_REF}}


# Where a registered query's id goes: every operation on /v1/queries/{query_id} and below.
QUERY_PATH = "/v1/queries/{query_id}"


def _link_queries(paths: dict) -> None:
    """OpenAPI links: what a client does next, and what schemathesis's stateful phase
    follows.  From POST /v1/queries's 201 to every operation on the new query (its `id` as
    their `query_id`) but those on a part a PUT creates (its webhook, its Kafka sink),
    which the PUT's 200 links to instead; from GET /v1/queries's 200 to the same
    operations on the page's first query; from POST /v1/snapshots to the snapshot's
    download."""
    def link(operation: dict, source: str, what: str) -> dict:
        return {"operationId": operation["operationId"],
                "parameters": {"query_id": source}, "description": what}

    new_query = {}
    for path, operations in paths.items():
        if not (path == QUERY_PATH or path.startswith(QUERY_PATH + "/")):
            continue
        put = operations.get("put")
        for method, operation in operations.items():
            what = f"{method.upper()} {path}"
            if put is not None and method != "put":
                put["responses"]["200"].setdefault("links", {})[operation["operationId"]] = \
                    link(operation, "$request.path.query_id", f"{what} just set")
            else:
                new_query[operation["operationId"]] = \
                    link(operation, "$response.body#/id", f"{what} of the registered query")
    paths["/v1/queries"]["post"]["responses"]["201"]["links"] = new_query
    snapshot = paths["/v1/snapshots/{batch}"]["get"]["operationId"]
    paths["/v1/snapshots"]["post"]["responses"]["201"]["links"] = {snapshot: {
        "operationId": snapshot, "parameters": {"batch": "$response.body#/batch"},
        "description": "GET /v1/snapshots/{batch}: the snapshot just taken"}}
    paths["/v1/queries"]["get"]["responses"]["200"]["links"] = {
        name: {**link, "parameters": {"query_id": "$response.body#/queries/0/id"},
               "description": link["description"].replace("registered query",
                                                          "page's first query")}
        for name, link in new_query.items()}


def _bound_pattern_size(document: dict, max_vertices: int) -> None:
    """A pattern's vertices as this server's max_query_vertices bounds them (the models'
    schemas say 32, the most it can be): the JSON pattern's `maxItems`, and the query-file
    text's expression wherever it stands."""
    document["components"]["schemas"]["Pattern"]["properties"]["vertices"]["maxItems"] = \
        max_vertices
    bounded = query_text_schema(max_vertices)

    def visit(node) -> None:
        if isinstance(node, dict):
            if node.get("pattern") == QUERY_TEXT_SCHEMA["pattern"]:
                node.update(bounded)
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(document)


def _parameters_without_null(parameters) -> None:
    """An optional parameter is left out to mean none: FastAPI's `anyOf [..., null]` for
    `int | None` would have clients send the text `null`, which no route takes."""
    for parameter in parameters:
        schema = parameter.get("schema", {})
        choices = [choice for choice in schema.get("anyOf", ()) if choice != {"type": "null"}]
        if len(choices) == 1 and len(schema["anyOf"]) == 2:
            del schema["anyOf"]
            schema.update(choices[0])


def _streams_by_item(responses: dict) -> None:
    """A stream a route describes event by event (`itemSchema`, as OpenAPI 3.2 has it) loses
    the `schema` FastAPI adds beside it (`type: string`), which would stand for the whole
    stream."""
    for entry in responses.values():
        for media in entry.get("content", {}).values():
            if "itemSchema" in media:
                media.pop("schema", None)


def _websockets(app: FastAPI) -> dict:
    """Every WebSocket route, as an `x-websockets` entry: its summary and description (the
    handler's docstring) and its path parameters."""
    found = {}
    for route, path in app_routes(app):
        if isinstance(route, APIWebSocketRoute) and path is not None:
            doc = inspect.getdoc(route.endpoint) or ""
            summary, _, description = doc.partition("\n\n")
            found[path] = {
                "summary": summary.replace("\n", " "),
                "description": description,
                "parameters": [{"name": name, "in": "path", "required": True}
                               for name in route.param_convertors]}
    return found


def app_routes(app: FastAPI) -> list[tuple[object, str | None]]:
    """Every route of the app with its full path.  FastAPI 0.16x keeps an included router
    as one entry of app.routes, its routes reached through iter_route_contexts; before,
    app.routes listed them all."""
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:
        return [(route, getattr(route, "path", None)) for route in app.routes]
    return [(context.original_route, context.path) for context in iter_route_contexts(app.routes)]
