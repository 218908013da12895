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
    """A provider error, normalised: class, provider, code and (bounded) message; for a
    context-limit error the prompt size and the limit when the provider states them."""

    error_class: ErrorClass
    provider: str = ""
    code: str = ""
    message: str = ""
    prompt_tokens: int = 0
    limit_tokens: int = 0
    output_tokens: int = 0


_ANTHROPIC_WITH_OUTPUT = re.compile(r"(\d[\d,]*) \+ (\d[\d,]*) > (\d[\d,]*)")
_ANTHROPIC_SIZES = re.compile(r"(\d[\d,]*) tokens? > (\d[\d,]*)(?: tokens?)? maximum")
_OPENAI_LIMIT = re.compile(r"maximum context length is (\d[\d,]*) tokens")
_OPENAI_PROMPT = re.compile(r"(?:resulted in|requested|you requested) (\d[\d,]*) tokens")
_LITELLM_ROUTER = re.compile(r"Max Input Tokens=(\d[\d,]*), Got=(\d[\d,]*)")
"""LiteLLM Router's own pre-call check: "… Model=gpt-4.1, Max Input Tokens=8192, Got=9000"."""


def _num(text: str) -> int:
    return int(text.replace(",", ""))


def _sizes(message: str) -> tuple[int, int, int]:
    """(prompt tokens, limit tokens, output tokens) stated in a provider message, 0 when
    absent ("input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000"
    states all three)."""
    m = _ANTHROPIC_WITH_OUTPUT.search(message)
    if m:
        return _num(m.group(1)), _num(m.group(3)), _num(m.group(2))
    m = _ANTHROPIC_SIZES.search(message)
    if m:
        return _num(m.group(1)), _num(m.group(2)), 0
    m = _LITELLM_ROUTER.search(message)
    if m:
        return _num(m.group(2)), _num(m.group(1)), 0
    limit = _OPENAI_LIMIT.search(message)
    prompt = _OPENAI_PROMPT.search(message)
    return (_num(prompt.group(1)) if prompt else 0, _num(limit.group(1)) if limit else 0, 0)


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
    prompt_tokens, limit_tokens, output_tokens = _sizes(message[:2000]) if is_limit else (0, 0, 0)
    return TurnError(
        error_class="context_limit" if is_limit else "other",
        provider=provider or guessed,
        code=code[:100],
        message=message[:500],
        prompt_tokens=min(prompt_tokens, 2**40),
        limit_tokens=min(limit_tokens, 2**40),
        output_tokens=min(output_tokens, 2**40),
    )
