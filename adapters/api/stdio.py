"""``ctxledger api --stdio``: the ``/v1/`` requests as JSON lines, for an orchestrator that
spawns ctxledger as a subprocess. Each line on stdin is ``{"id": .., "method": "POST", "path":
"/v1/...", "body": {...}, "idempotency_key": ".."}`` (``query`` optional, an object of
strings); each answer is one line on stdout, ``{"id": .., "status": .., "body": ..}``, in the
order asked. A line that is not such a request is answered with status 400 (its ``id`` when
it has one). No token: whoever spawned the process holds its pipes."""

from __future__ import annotations

from typing import IO, Any

import msgspec

from ctxledger.adapters.api.errors import error_body
from ctxledger.adapters.api.openapi import openapi_document
from ctxledger.adapters.api.service import ApiService

__all__ = ["StdioRequest", "serve_stdio"]


class StdioRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    id: Any = None
    method: str
    path: str
    body: Any = None
    query: dict[str, str] = {}
    idempotency_key: str | None = None


def _answer(service: ApiService, line: bytes) -> bytes:
    try:
        req = msgspec.json.decode(line, type=StdioRequest)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        status, body = error_body(400, "invalid_request", f"not a request line: {exc}")
        ident = None
        try:
            raw = msgspec.json.decode(line)
            ident = raw.get("id") if isinstance(raw, dict) else None
        except msgspec.DecodeError:
            pass
        return msgspec.json.encode({"id": ident, "status": status, "body": msgspec.Raw(body)})
    if req.method.upper() == "GET" and req.path == "/v1/openapi.json":
        status, body = 200, msgspec.json.encode(openapi_document(service.version))
    else:
        status, body = service.handle(
            req.method.upper(),
            req.path,
            query=req.query,
            body=b"" if req.body is None else msgspec.json.encode(req.body),
            idempotency_key=req.idempotency_key,
        )
    return msgspec.json.encode({"id": req.id, "status": status, "body": msgspec.Raw(body)})


def serve_stdio(service: ApiService, stdin: IO[bytes], stdout: IO[bytes]) -> int:
    """Answer every request line of *stdin* until it ends; returns how many were answered."""
    n = 0
    for line in stdin:
        if not line.strip():
            continue
        stdout.write(_answer(service, line) + b"\n")
        stdout.flush()
        n += 1
    return n
