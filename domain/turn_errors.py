"""Classifies provider errors of a model call: only context-limit errors trigger a refresh."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

import msgspec

__all__ = ["ErrorClass", "TurnError", "classify_turn_error"]

ErrorClass = Literal["context_limit", "other"]

_CONTEXT_CODES = frozenset(
    {
        "context_length_exceeded",
        "string_above_max_length",
        "request_too_large",
        "context_window_exceeded",
        "model_context_window_exceeded",
    }
)
_CONTEXT_TEXT = re.compile(
    r"prompt is too long"
    r"|input is too long"
    r"|maximum context length"
    r"|context[ _-]?(?:length|window)"
    r"|too many (?:input )?tokens"
    r"|exceeds? (?:the )?(?:model'?s? )?(?:maximum )?(?:context|token limit)"
    r"|reduce the length of the messages"
    r"|input tokens exceed",
    re.IGNORECASE,
)


class TurnError(msgspec.Struct, frozen=True, kw_only=True):
    """A provider error, normalised: class, provider, code and (bounded) message."""

    error_class: ErrorClass
    provider: str = ""
    code: str = ""
    message: str = ""


def _find(body: Mapping[str, Any]) -> tuple[str, str, str]:
    """(provider guess, code/type, message) from an Anthropic, OpenAI or generic body."""
    err = body.get("error", body)
    if isinstance(err, str):
        return "", "", err
    if not isinstance(err, Mapping):
        return "", "", str(err)
    message = str(err.get("message", "") or body.get("message", ""))
    code = str(err.get("code") or err.get("type") or body.get("code") or "")
    if body.get("type") == "error":
        provider = "anthropic"
    elif "code" in err or "param" in err:
        provider = "openai"
    else:
        provider = ""
    return provider, code, message


def classify_turn_error(error: object, *, provider: str = "") -> TurnError:
    """Classify *error*: a provider body (mapping), an exception, or a message string.

    Anthropic: ``{"type": "error", "error": {"type": "invalid_request_error",
    "message": "prompt is too long: …"}}``; OpenAI: ``{"error": {"code":
    "context_length_exceeded", …}}``; anything whose text says the context length or token
    limit was exceeded. Everything else is ``other``.
    """
    body: Mapping[str, Any] | None = None
    if isinstance(error, Mapping):
        body = error
    else:
        for attr in ("body", "response_body", "json_body"):
            candidate = getattr(error, attr, None)
            if isinstance(candidate, Mapping):
                body = candidate
                break
    if body is not None:
        guessed, code, message = _find(body)
    else:
        guessed, code = "", str(getattr(error, "code", "") or "")
        message = str(error)
    is_limit = code in _CONTEXT_CODES or bool(_CONTEXT_TEXT.search(message))
    return TurnError(
        error_class="context_limit" if is_limit else "other",
        provider=provider or guessed,
        code=code[:100],
        message=message[:500],
    )
