"""Owns the typed dependencies route handlers ask for: the service state, the API-key check
and the refusal of unknown query parameters."""
from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, HTTPException
from fastapi.exceptions import RequestValidationError
from starlette.datastructures import QueryParams
from starlette.requests import HTTPConnection

from service.settings import Settings
from service.state import ServiceState


# Dependencies are coroutines: FastAPI runs a plain `def` dependency in the thread pool,
# two thread hops per request for what is an attribute lookup.
async def get_state(conn: HTTPConnection) -> ServiceState:
    return conn.app.state.motifstream


StateDep = Annotated[ServiceState, Depends(get_state)]


def key_accepted(settings: Settings, presented: str | None) -> bool:
    """True when no key is configured or `presented` equals it (constant-time)."""
    if settings.api_key is None:
        return True
    if presented is None:
        return False
    return hmac.compare_digest(presented.encode(), settings.api_key.get_secret_value().encode())


def presented_key(conn: HTTPConnection) -> str | None:
    """The bearer token of the Authorization header, or the `access_token` query parameter
    (browsers cannot set headers on a WebSocket)."""
    return bearer_token(conn.headers.get("authorization"), conn.scope.get("query_string", b""))


def bearer_token(authorization: str | None, query_string: bytes) -> str | None:
    """`presented_key` from the raw Authorization header value and query string."""
    if authorization:
        scheme, _, token = authorization.partition(" ")
        return token.strip() if scheme.lower() == "bearer" else None
    if not query_string:
        return None
    return QueryParams(query_string).get("access_token")


async def require_api_key(conn: HTTPConnection) -> None:
    """Router dependency: 401 unless the request carries the configured API key."""
    if not key_accepted(conn.app.state.motifstream.settings, presented_key(conn)):
        raise unauthorized()


def unauthorized() -> HTTPException:
    """The 401 of a request without the configured API key."""
    return HTTPException(401, "missing or wrong API key (Authorization: Bearer <key>)",
                         headers={"WWW-Authenticate": "Bearer"})


# Taken by every route besides its own query parameters: the API key (presented_key).
ALWAYS_ACCEPTED_PARAMETERS = frozenset(("access_token",))


async def reject_unknown_parameters(conn: HTTPConnection) -> None:
    """Router dependency: 422 naming the first query parameter the route does not take,
    rather than ignoring it (a misspelt `limt=10` or a `dry_run` sent to a route without
    one would otherwise do silently what the client did not ask for).  WebSocket routes
    check their own (a close code must follow the handshake)."""
    if conn.scope["type"] != "http" or not conn.scope.get("query_string"):
        return
    known = ALWAYS_ACCEPTED_PARAMETERS | _query_parameters(conn.scope["route"].dependant)
    unknown = next((name for name in conn.query_params if name not in known), None)
    if unknown is not None:
        raise RequestValidationError([{
            "loc": ("query", unknown), "type": "extra_forbidden",
            "msg": f"unknown query parameter (this route takes {', '.join(sorted(known))})"}])


def _query_parameters(dependant) -> frozenset[str]:
    """The query parameters a route's handler and its dependencies declare (FastAPI's
    Dependant tree)."""
    names = {field.alias for field in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_parameters(sub)
    return frozenset(names)
