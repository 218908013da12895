"""Provider token usage (Anthropic, OpenAI, DeepSeek shapes) normalised, and the cache hit rate."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

import msgspec

from ctxledger.domain.errors import InvalidInputError

__all__ = ["Provider", "Usage", "hit_rate", "normalize_usage", "usage_mapping"]

Provider = Literal["anthropic", "openai", "deepseek"]


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """Token usage of one call. ``input_tokens`` counts only uncached input, so the prompt's
    size is ``input_tokens + cache_read_tokens + cache_write_tokens`` for every provider.
    Field names match :class:`~ctxledger.domain.events.CacheUsageRecorded`."""

    provider: Provider
    input_tokens: int
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    @property
    def hit_rate(self) -> float:
        return hit_rate(self.input_tokens, self.cache_read_tokens, self.cache_write_tokens)


def hit_rate(input_tokens: int, cache_read: int, cache_write: int) -> float:
    """CacheRead / (Input + CacheRead + CacheWrite); 0.0 when the denominator is 0.

    Raises InvalidInputError on a negative count."""
    if min(input_tokens, cache_read, cache_write) < 0:
        raise InvalidInputError("token counts must not be negative")
    total = input_tokens + cache_read + cache_write
    return cache_read / total if total else 0.0


def _count(raw: Mapping[str, Any], key: str, *, required: bool) -> int:
    value = raw.get(key)
    if value is None:
        if required:
            raise InvalidInputError(f"usage: missing {key!r}")
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInputError(f"usage: {key!r} must be a non-negative integer")
    return value


_USAGE_FIELDS = (
    "usage",
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "input_tokens_details",
    "prompt_tokens",
    "completion_tokens",
    "prompt_tokens_details",
    "prompt_cache_hit_tokens",
    "prompt_cache_miss_tokens",
    "cached_tokens",
)
"""The attributes read from a plain attribute object (every key ``normalize_usage`` reads)."""


def usage_mapping(raw: object, what: str = "usage") -> Mapping[str, Any]:
    """*raw* as a mapping: a mapping as is; an SDK object through its own ``model_dump()``
    (pydantic: anthropic ``Usage``, openai ``CompletionUsage``/``ResponseUsage``, LiteLLM) or
    ``to_dict()``; a dataclass (openai-agents ``Usage``) field by field; any other object by
    the usage attributes it has. Nested objects are converted when read. None, a string, a
    number or a sequence raise InvalidInputError."""
    if isinstance(raw, Mapping):
        return raw
    if raw is None or isinstance(raw, str | bytes | bytearray | int | float | list | tuple):
        raise InvalidInputError(f"{what} must be a mapping or a usage object, not {_kind(raw)}")
    for method in ("model_dump", "to_dict"):
        dump = getattr(raw, method, None)
        if callable(dump):
            try:
                value = dump()
            except Exception as exc:  # a foreign object's own conversion failed
                raise InvalidInputError(f"{what}: {method}() failed: {exc}") from None
            if isinstance(value, Mapping):
                return value
    if dataclasses.is_dataclass(raw) and not isinstance(raw, type):
        return {f.name: getattr(raw, f.name) for f in dataclasses.fields(raw)}
    found = {key: getattr(raw, key, None) for key in _USAGE_FIELDS}
    present = {key: value for key, value in found.items() if value is not None}
    if not present:
        raise InvalidInputError(f"{what}: {_kind(raw)} has no usage fields")
    return present


def _kind(value: object) -> str:
    return "None" if value is None else type(value).__name__[:60]


def _details(raw: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = raw.get(key)
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return value
    try:
        return usage_mapping(value, f"usage: {key!r}")
    except InvalidInputError:
        raise InvalidInputError(f"usage: {key!r} must be an object") from None


def _included_cached(total: int, cached: int, total_key: str) -> int:
    if cached > total:
        raise InvalidInputError(f"usage: cached_tokens {cached} exceed {total_key} {total}")
    return total - cached


def normalize_usage(raw: object) -> Usage:
    """Normalise a provider usage object (or a whole response body holding ``usage``): a
    mapping, or an SDK object as :func:`usage_mapping` reads it.

    - DeepSeek: ``prompt_cache_hit_tokens`` (read), ``prompt_cache_miss_tokens`` (input),
      ``completion_tokens``.
    - Anthropic Messages: ``input_tokens`` (already uncached), ``cache_read_input_tokens``,
      ``cache_creation_input_tokens`` (write), ``output_tokens``.
    - OpenAI Responses: ``input_tokens`` *including* ``input_tokens_details.cached_tokens``,
      ``output_tokens``; input = input_tokens - cached.
    - Anthropic through LiteLLM (OpenAI field names): ``prompt_tokens`` *including*
      ``cache_read_input_tokens`` and ``cache_creation_input_tokens``, ``completion_tokens``;
      input = prompt_tokens - read - write.
    - OpenAI Chat Completions: ``prompt_tokens`` *including*
      ``prompt_tokens_details.cached_tokens``, ``completion_tokens``; input = prompt_tokens -
      cached. OpenAI reports no cache writes.

    Raises InvalidInputError on an unknown shape or a count that is not a non-negative integer.
    """
    raw = usage_mapping(raw)
    nested = raw.get("usage")
    if nested is not None and not isinstance(nested, int | float | str):
        raw = usage_mapping(nested)
    if "prompt_cache_hit_tokens" in raw or "prompt_cache_miss_tokens" in raw:
        return Usage(
            provider="deepseek",
            input_tokens=_count(raw, "prompt_cache_miss_tokens", required=True),
            cache_read_tokens=_count(raw, "prompt_cache_hit_tokens", required=True),
            output_tokens=_count(raw, "completion_tokens", required=False),
        )
    if "input_tokens" in raw and "input_tokens_details" in raw:
        total = _count(raw, "input_tokens", required=True)
        cached = _count(_details(raw, "input_tokens_details"), "cached_tokens", required=False)
        return Usage(
            provider="openai",
            input_tokens=_included_cached(total, cached, "input_tokens"),
            cache_read_tokens=cached,
            output_tokens=_count(raw, "output_tokens", required=False),
        )
    if "input_tokens" in raw:
        return Usage(
            provider="anthropic",
            input_tokens=_count(raw, "input_tokens", required=True),
            cache_read_tokens=_count(raw, "cache_read_input_tokens", required=False),
            cache_write_tokens=_count(raw, "cache_creation_input_tokens", required=False),
            output_tokens=_count(raw, "output_tokens", required=False),
        )
    if "prompt_tokens" in raw and (
        "cache_read_input_tokens" in raw or "cache_creation_input_tokens" in raw
    ):
        total = _count(raw, "prompt_tokens", required=True)
        read = _count(raw, "cache_read_input_tokens", required=False)
        write = _count(raw, "cache_creation_input_tokens", required=False)
        if total >= read + write:
            return Usage(
                provider="anthropic",
                input_tokens=total - read - write,
                cache_read_tokens=read,
                cache_write_tokens=write,
                output_tokens=_count(raw, "completion_tokens", required=False),
            )
    if "prompt_tokens" in raw:
        total = _count(raw, "prompt_tokens", required=True)
        cached = _count(_details(raw, "prompt_tokens_details"), "cached_tokens", required=False)
        return Usage(
            provider="openai",
            input_tokens=_included_cached(total, cached, "prompt_tokens"),
            cache_read_tokens=cached,
            output_tokens=_count(raw, "completion_tokens", required=False),
        )
    keys = ", ".join(sorted(str(k)[:40] for k in raw)[:8]) or "none"
    raise InvalidInputError(f"unknown usage shape (keys: {keys})")
