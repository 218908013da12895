"""Usage read from each SDK's own usage type, with the provider taken from the call.

``read_usage`` dispatches on the type of the usage object: anthropic ``Usage``, openai chat
``CompletionUsage`` and Responses ``ResponseUsage``, LiteLLM ``Usage``, openai-agents
``Usage``, pydantic-ai ``RunUsage`` / ``RequestUsage`` (when installed); a LangChain
``usage_metadata`` (a TypedDict, so a plain dict at run time) is read by
``read_langchain_usage``. Each reader knows its SDK's counting rules:

- anthropic ``Usage``: ``input_tokens`` is already uncached; ``cache_read_input_tokens``,
  ``cache_creation_input_tokens`` (write) beside it.
- openai ``CompletionUsage``: ``prompt_tokens`` *includes*
  ``prompt_tokens_details.cached_tokens`` (read) and ``.cache_write_tokens`` (write, newer
  SDKs); ``ResponseUsage`` / openai-agents ``Usage``: ``input_tokens`` *includes*
  ``input_tokens_details.cached_tokens`` and ``.cache_write_tokens`` (the Agents SDK fills
  the writes in for Claude through LiteLLM).
- LiteLLM ``Usage`` (OpenAI field names for every model): ``prompt_tokens`` *includes* the
  cache reads (``cache_read_input_tokens`` or ``prompt_tokens_details.cached_tokens``) and the
  cache writes (``cache_creation_input_tokens`` or ``prompt_tokens_details.cache_write_tokens``).
- LangChain ``usage_metadata``: ``input_tokens`` is the sum of every input token type;
  ``input_token_details.cache_read`` and ``.cache_creation`` are parts of it.
- pydantic-ai: ``input_tokens`` includes ``cache_read_tokens`` and ``cache_write_tokens``.

The provider is the caller's: the SDK's own when it speaks for one provider (anthropic,
openai), else the *provider* the adapter passes (the model route of the call). A type that
serves many providers (LiteLLM, openai-agents, pydantic-ai) given without a *provider* is read
as ``normalize_usage`` reads it (the provider guessed from its key names: the framework
adapters always pass the call's provider, so they never guess). A mapping or an object of no known type goes to
``normalize_usage`` (which reads the shape from its key names), its provider replaced by
*provider* when given.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any, get_args

import msgspec

from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.usage import Provider, Usage, normalize_usage, usage_mapping

__all__ = ["check_provider", "read_langchain_usage", "read_usage"]

_PROVIDERS: tuple[str, ...] = get_args(Provider)


def check_provider(provider: str) -> Provider:
    """*provider* when it is one the ledger books (anthropic, openai, deepseek); else raises
    InvalidInputError."""
    if provider not in _PROVIDERS:
        raise InvalidInputError(
            f"provider must be one of {', '.join(_PROVIDERS)}, not {provider[:40]!r}"
        )
    return provider  # type: ignore[return-value]  # checked against Provider's own values


def _int(value: Any, what: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInputError(f"usage: {what} must be a non-negative integer")
    return value


def _get(obj: Any, *path: str) -> Any:
    """``obj.a.b`` (or ``obj["a"]["b"]``), None where a step is missing."""
    for key in path:
        if obj is None:
            return None
        obj = obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key, None)
    return obj


def _split(
    provider: Provider, total: int, *, read: int, write: int, output: int, what: str
) -> Usage:
    """A usage whose *total* input includes its cache reads and writes."""
    if read + write > total:
        raise InvalidInputError(f"usage: cached tokens {read + write} exceed {what} {total}")
    return Usage(
        provider=provider,
        input_tokens=total - read - write,
        cache_read_tokens=read,
        cache_write_tokens=write,
        output_tokens=output,
    )


def _anthropic(u: Any, provider: Provider) -> Usage:
    return Usage(
        provider=provider,
        input_tokens=_int(u.input_tokens, "input_tokens"),
        cache_read_tokens=_int(u.cache_read_input_tokens, "cache_read_input_tokens"),
        cache_write_tokens=_int(u.cache_creation_input_tokens, "cache_creation_input_tokens"),
        output_tokens=_int(u.output_tokens, "output_tokens"),
    )


def _openai_chat(u: Any, provider: Provider) -> Usage:
    cached = _int(_get(u, "prompt_tokens_details", "cached_tokens"), "cached_tokens")
    write = _int(_get(u, "prompt_tokens_details", "cache_write_tokens"), "cache_write_tokens")
    total = _int(u.prompt_tokens, "prompt_tokens")
    output = _int(u.completion_tokens, "completion_tokens")
    return _split(provider, total, read=cached, write=write, output=output, what="prompt_tokens")


def _openai_responses(u: Any, provider: Provider) -> Usage:
    cached = _int(_get(u, "input_tokens_details", "cached_tokens"), "cached_tokens")
    write = _int(_get(u, "input_tokens_details", "cache_write_tokens"), "cache_write_tokens")
    total = _int(u.input_tokens, "input_tokens")
    output = _int(u.output_tokens, "output_tokens")
    return _split(provider, total, read=cached, write=write, output=output, what="input_tokens")


def _litellm(u: Any, provider: Provider) -> Usage:
    read = _int(
        _get(u, "cache_read_input_tokens") or _get(u, "prompt_tokens_details", "cached_tokens"),
        "cache_read_input_tokens",
    )
    write = _int(
        _get(u, "cache_creation_input_tokens")
        or _get(u, "prompt_tokens_details", "cache_write_tokens"),
        "cache_creation_input_tokens",
    )
    total = _int(u.prompt_tokens, "prompt_tokens")
    output = _int(u.completion_tokens, "completion_tokens")
    return _split(provider, total, read=read, write=write, output=output, what="prompt_tokens")


def _pydantic_ai(u: Any, provider: Provider) -> Usage:
    read = _int(getattr(u, "cache_read_tokens", 0), "cache_read_tokens")
    write = _int(getattr(u, "cache_write_tokens", 0), "cache_write_tokens")
    total = _int(u.input_tokens, "input_tokens")
    output = _int(u.output_tokens, "output_tokens")
    return _split(provider, total, read=read, write=write, output=output, what="input_tokens")


Reader = Callable[[Any, Provider], Usage]

# (top package, module, class, reader, the provider the type itself speaks for or None);
# the first match wins, so a subclass comes before its base (LiteLLM's Usage derives from
# openai's CompletionUsage)
_TYPES: tuple[tuple[str, str, str, Reader, Provider | None], ...] = (
    ("litellm", "litellm.types.utils", "Usage", _litellm, None),
    ("anthropic", "anthropic.types", "Usage", _anthropic, "anthropic"),
    ("openai", "openai.types", "CompletionUsage", _openai_chat, "openai"),
    ("openai", "openai.types.responses", "ResponseUsage", _openai_responses, "openai"),
    ("agents", "agents.usage", "Usage", _openai_responses, None),
    ("pydantic_ai", "pydantic_ai.usage", "RunUsage", _pydantic_ai, None),
    ("pydantic_ai", "pydantic_ai.usage", "RequestUsage", _pydantic_ai, None),
    ("pydantic_ai", "pydantic_ai.usage", "Usage", _pydantic_ai, None),
)


def _sdk_type(module: str, name: str) -> type | None:
    try:
        found = getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None
    return found if isinstance(found, type) else None


def read_usage(usage: object, *, provider: str | None = None) -> Usage:
    """*usage* (an SDK's own usage object, a mapping, or a whole response holding ``usage``)
    normalised, booked under *provider* when given (see the module docs); raises
    InvalidInputError on an unknown shape, a bad count or an unknown *provider*."""
    if isinstance(usage, Usage):
        return (
            usage
            if provider is None
            else msgspec.structs.replace(usage, provider=check_provider(provider))
        )
    chosen = None if provider is None else check_provider(provider)
    nested = getattr(usage, "usage", None)
    if nested is not None and not isinstance(usage, Mapping) and _reader_of_mro(usage) is None:
        usage = nested  # a whole response (anthropic Message, openai ChatCompletion…)
    found = _reader_of_mro(usage)
    if found is None:
        u = normalize_usage(usage)
        return u if chosen is None else msgspec.structs.replace(u, provider=chosen)
    reader, own = found
    booked = chosen or own
    if booked is None:  # the key-name reading, kept for callers that name no provider
        return normalize_usage(usage)
    return reader(usage, booked)


def _reader_of_mro(usage: object) -> tuple[Reader, Provider | None] | None:
    """The reader for the first SDK type *usage* is an instance of, trying only the SDKs its
    class and bases come from (nothing else is imported)."""
    roots = {c.__module__.split(".")[0] for c in type(usage).__mro__}
    for package, module, name, reader, own in _TYPES:
        if package not in roots:
            continue
        cls = _sdk_type(module, name)
        if cls is not None and isinstance(usage, cls):
            return reader, own
    return None


def read_langchain_usage(metadata: object, *, provider: str) -> Usage:
    """A LangChain ``AIMessage.usage_metadata`` (``input_tokens`` the sum of every input type,
    ``input_token_details`` with ``cache_read`` and ``cache_creation``) booked under
    *provider* (LangChain serves every provider, so it is required). Also takes the
    ``AIMessage`` itself."""
    chosen = check_provider(provider)
    found = getattr(metadata, "usage_metadata", None)
    if found is not None:
        metadata = found
    if not isinstance(metadata, Mapping):
        kind = "None" if metadata is None else type(metadata).__name__[:60]
        raise InvalidInputError(f"usage_metadata must be a mapping, not {kind}")
    if "input_tokens" not in metadata:
        raise InvalidInputError("usage_metadata: missing 'input_tokens'")
    details = usage_mapping(metadata.get("input_token_details") or {}, "input_token_details")
    return _split(
        chosen,
        _int(metadata["input_tokens"], "input_tokens"),
        read=_int(details.get("cache_read"), "cache_read"),
        write=_int(details.get("cache_creation"), "cache_creation"),
        output=_int(metadata.get("output_tokens"), "output_tokens"),
        what="input_tokens",
    )
