"""Errors of ``ctxledger api`` as ``{"error": {"type", "message", "field"}}``: 4xx for the
caller's mistakes (422 a bad body or input, 404 an unknown agent or endpoint, 401 no or a wrong
token, 409 a conflict or an ``Idempotency-Key`` reused with another body), 5xx only for ours
(503 the store is unreachable, 500 a bug)."""

from __future__ import annotations

import logging
import re

import msgspec

from ctxledger.adapters.api.types import ErrorBody, ErrorDetail
from ctxledger.domain.errors import (
    ConflictError,
    CtxLedgerError,
    DamagedStreamError,
    InvalidInputError,
    LedgerUnavailableError,
    RefreshExhaustedError,
    UnknownAgentError,
    UnknownGenerationError,
)

__all__ = ["ApiError", "error_body", "error_response"]

log = logging.getLogger("ctxledger.api")

_AT = re.compile(r"at `\$\.?([^`]*)`")
_MISSING = re.compile(r"(?:missing required|contains unknown) field `([^`]*)`")


class ApiError(CtxLedgerError):
    """An answer other than success, with its status, type and the field at fault."""

    def __init__(self, status: int, kind: str, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.field = status, kind, field


def _field_of(message: str) -> str | None:
    """The field a msgspec error names (``items[0].layer``), or None."""
    at, missing = _AT.search(message), _MISSING.search(message)
    parts = [p for p in (at.group(1) if at else "", missing.group(1) if missing else "") if p]
    return ".".join(parts) or None


def error_body(status: int, kind: str, message: str, field: str | None = None) -> tuple[int, bytes]:
    detail = ErrorDetail(type=kind, message=" ".join(message.split())[:2000], field=field)
    return status, msgspec.json.encode(ErrorBody(error=detail))


def _classify(exc: Exception) -> tuple[int, str, str | None]:
    """``(status, type, field)`` of *exc*."""
    if isinstance(exc, ApiError):
        return exc.status, exc.kind, exc.field
    if isinstance(exc, msgspec.ValidationError | msgspec.DecodeError):
        return 422, "invalid_body", _field_of(str(exc))
    if isinstance(exc, UnknownAgentError):
        return 404, "unknown_agent", "agent_id"
    if isinstance(exc, UnknownGenerationError):
        return 404, "unknown_generation", "generation"
    if isinstance(exc, InvalidInputError):
        return 422, "invalid_input", _field_of(str(exc))
    if isinstance(exc, RefreshExhaustedError):
        return 409, "refresh_exhausted", None
    if isinstance(exc, ConflictError | DamagedStreamError):
        return 409, "conflict", None
    if isinstance(exc, LedgerUnavailableError):
        return 503, "unavailable", None
    return 500, "internal", None


def error_response(exc: Exception) -> tuple[int, bytes]:
    """The status and error body of *exc* (an unexpected one is logged with its traceback and
    answered 500 without its details)."""
    status, kind, field = _classify(exc)
    if status == 500:
        log.error("api: unexpected %s", type(exc).__name__, exc_info=exc)
        return error_body(500, kind, f"internal error ({type(exc).__name__}); see the server log")
    return error_body(status, kind, str(exc), field)
