"""Rendering a built prompt as a provider request (Anthropic, OpenAI chat, OpenAI responses)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Literal, Protocol, cast, overload

from ctxledger.adapters.engine.core import BuildResult, EngineCore
from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.render import (
    PROVIDERS,
    AnthropicRequest,
    CacheTTL,
    OpenAIChatRequest,
    OpenAIResponsesRequest,
    Provider,
    ProviderRequest,
    render_anthropic,
    to_openai,
    to_openai_responses,
)

__all__ = ["Render", "Renderer"]


class Renderer(Protocol):
    """``render(result, provider, model, …)``: the provider request body for a built prompt,
    typed per provider, with the caller's conversation ``messages`` and ``tools`` placed
    after the static prefix by the provider's cache order (docs/caching.md, "Provider
    requests"). ``max_tokens`` and ``cache_ttl`` are Anthropic's; ``prompt_cache_key`` is
    OpenAI's (chat and responses). Anthropic breakpoints are spent only where the prefix
    reaches the model's minimum cacheable length (counted with the engine's counter); every
    breakpoint dropped or left out is logged on the ``ctxledger.render`` logger
    (``render_anthropic`` returns them). The overloads are declared once, here: the engine's
    ``render`` and ``AsyncContextEngine.render`` are both a ``Renderer``."""

    @overload
    def __call__(
        self,
        result: BuildResult,
        provider: Literal["anthropic"],
        model: str,
        *,
        max_tokens: int = ...,
        messages: Sequence[Any] | None = ...,
        tools: Sequence[Any] | None = ...,
        cache_ttl: CacheTTL | None = ...,
        prompt_cache_key: None = ...,
    ) -> AnthropicRequest: ...

    @overload
    def __call__(
        self,
        result: BuildResult,
        provider: Literal["openai"],
        model: str,
        *,
        max_tokens: int = ...,
        messages: Sequence[Any] | None = ...,
        tools: Sequence[Any] | None = ...,
        cache_ttl: None = ...,
        prompt_cache_key: str | None = ...,
    ) -> OpenAIChatRequest: ...

    @overload
    def __call__(
        self,
        result: BuildResult,
        provider: Literal["openai-responses"],
        model: str,
        *,
        max_tokens: int = ...,
        messages: Sequence[Any] | None = ...,
        tools: Sequence[Any] | None = ...,
        cache_ttl: None = ...,
        prompt_cache_key: str | None = ...,
    ) -> OpenAIResponsesRequest: ...


class Render(EngineCore):
    """``render``: the typed request body of a provider for a ``BuildResult``."""

    @property
    def render(self) -> Renderer:
        """The engine's :class:`Renderer` (pure: it reads only the engine's counter)."""
        return cast(Renderer, self._render)

    def _render(
        self,
        result: BuildResult,
        provider: Provider,
        model: str,
        *,
        max_tokens: int = 4096,
        messages: Sequence[Any] | None = None,
        tools: Sequence[Any] | None = None,
        cache_ttl: CacheTTL | None = None,
        prompt_cache_key: str | None = None,
    ) -> ProviderRequest:
        """``render``'s body (see :class:`Renderer`)."""
        if provider == "anthropic":
            if prompt_cache_key is not None:
                raise InvalidInputError("prompt_cache_key is OpenAI's; Anthropic has none")
            rendered = render_anthropic(
                result.prompt,
                model=model,
                max_tokens=max_tokens,
                messages=messages or (),
                tools=tools,
                cache_ttl=cache_ttl,
                counter=self.counter,
            )
            log = logging.getLogger("ctxledger.render")
            for note in rendered.notes:
                log.log(
                    logging.WARNING if note.caller else logging.DEBUG,
                    "%s: %s",
                    note.where,
                    note.reason,
                    extra={"agent_id": result.pack.agent_id, "generation": result.generation},
                )
            return rendered.request
        if provider not in PROVIDERS:
            raise InvalidInputError(
                f"unknown provider {provider!r}; use one of {', '.join(PROVIDERS)}"
            )
        if cache_ttl is not None:
            raise InvalidInputError(f"cache_ttl is Anthropic's; {provider} caches on its own")
        to = to_openai if provider == "openai" else to_openai_responses
        return to(
            result.prompt,
            model=model,
            messages=messages or (),
            tools=tools,
            prompt_cache_key=prompt_cache_key,
        )
