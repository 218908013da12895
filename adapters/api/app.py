"""The HTTP transport of ``ctxledger api``: a Starlette app that hands every ``/v1/`` request to
``ApiService.handle`` in a worker thread (the engine blocks; its lock serialises the calls),
after the bearer token (compared in constant time) when the server has one.

A web page in the user's browser must not drive a loopback server: a POST must say
``Content-Type: application/json`` (415 otherwise: a cross-site page cannot send that without
a CORS preflight, which this server never grants), and without a token a loopback bind answers
only to loopback Host names (421 otherwise: DNS rebinding)."""

from __future__ import annotations

import hmac
import ipaddress

import msgspec
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ctxledger.adapters.api.errors import error_body
from ctxledger.adapters.api.openapi import openapi_document
from ctxledger.adapters.api.service import ApiService

__all__ = ["MAX_BODY_BYTES", "create_api_app", "is_loopback_bind", "token_matches"]

MAX_BODY_BYTES = 32 << 20
"""A larger body is refused (413) before it is read whole."""

_JSON = "application/json"


def is_loopback_bind(host: str) -> bool:
    """True for ``localhost`` and any loopback address (``127.0.0.1``, ``::1``, ``[::1]``)."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def token_matches(header: str, token: str) -> bool:
    """Whether an ``Authorization`` header carries ``Bearer <token>`` (constant time)."""
    scheme, _, given = header.partition(" ")
    ok_scheme = scheme.lower() == "bearer"
    return hmac.compare_digest(given.strip().encode(), token.encode()) and ok_scheme


def _loopback_host(header: str) -> bool:
    """Whether a ``Host`` header names a loopback host (any port)."""
    name = header.rsplit("]", 1)[0] + "]" if header.startswith("[") else header.rsplit(":", 1)[0]
    return is_loopback_bind(name)


def _refusal(request: Request, token: str | None) -> tuple[int, bytes] | None:
    """The answer to a request refused before it reaches the service (None: it may pass)."""
    if token is None and not _loopback_host(request.headers.get("host", "")):
        return error_body(
            421, "misdirected", "this server answers loopback Host names only", "Host"
        )
    if token is not None and not token_matches(request.headers.get("authorization", ""), token):
        return error_body(401, "unauthorized", "missing or wrong bearer token", "Authorization")
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if request.method == "POST" and kind != _JSON:
        return error_body(
            415, "unsupported_media_type", "a POST body must be application/json", "Content-Type"
        )
    size = request.headers.get("content-length", "0")
    if not size.isdigit() or int(size) > MAX_BODY_BYTES:
        return error_body(413, "too_large", f"bodies are at most {MAX_BODY_BYTES} bytes")
    return None


def _json(status: int, body: bytes) -> Response:
    return Response(body, status_code=status, media_type=_JSON)


def create_api_app(service: ApiService, *, token: str | None = None) -> Starlette:
    """The app over *service*; with *token*, every request must send ``Authorization: Bearer``."""

    async def handle(request: Request) -> Response:
        refused = _refusal(request, token)
        if refused is not None:
            status, body = refused
            extra = {"WWW-Authenticate": "Bearer"} if status == 401 else None
            return Response(body, status_code=status, media_type=_JSON, headers=extra)
        path = request.url.path
        if path == "/v1/openapi.json" and request.method == "GET":
            return _json(200, msgspec.json.encode(openapi_document(service.version)))
        raw = await request.body()
        if len(raw) > MAX_BODY_BYTES:
            return _json(
                *error_body(413, "too_large", f"bodies are at most {MAX_BODY_BYTES} bytes")
            )
        status, body = await run_in_threadpool(
            service.handle,
            request.method,
            path,
            query=dict(request.query_params),
            body=raw,
            idempotency_key=request.headers.get("idempotency-key"),
        )
        return _json(status, body)

    return Starlette(
        routes=[Route("/{path:path}", handle, methods=["GET", "POST", "PUT", "PATCH", "DELETE"])]
    )
