"""LiteLLM with ctxledger as its context: request kwargs out, usage and errors back in.

``completion_kwargs`` turns a build into the keyword arguments of ``litellm.completion`` /
``litellm.acompletion``. LiteLLM takes OpenAI chat messages for every model; the engine's
own renderers shape them (nothing is rendered here):

- an Anthropic model (``anthropic/…`` or a bare ``claude-…``; ``provider="anthropic"`` for
  others, e.g. Claude on Bedrock or Vertex AI) gets ``engine.render(…, "anthropic", …)``: the
  system blocks become one ``system`` message whose content blocks keep their
  ``cache_control`` (LiteLLM passes them on to Anthropic), then the caller's messages, with
  breakpoints counted across tools + system + messages (at most four);
- every other model gets ``engine.render(…, "openai", …)``: a ``system`` message with the
  static prefix, a ``user`` message with the dynamic part, then the caller's messages.

``report_response`` reports a response's usage (LiteLLM's ``Usage``: OpenAI field names,
with Anthropic's cache reads and writes when the model is Anthropic's), booked under the
call's provider (``completion`` / ``acompletion`` pass the shape the request was made for).
With ``stream=True`` they return the stream and book its usage when it ends
(``litellm_stream``). A context-limit
error is LiteLLM's ``ContextWindowExceededError``: ``engine.on_turn_error`` classes it and
reads the sizes its message states. ``completion`` / ``acompletion`` run one whole turn:
build, call, report usage, and on a context-limit error refresh and call again.

    kwargs = completion_kwargs(engine, engine.build("worker-1"), "anthropic/claude-sonnet-4-5",
                               messages=[{"role": "user", "content": "Fix the failing test"}])
    response = litellm.completion(**kwargs)
    report_response(engine, "worker-1", response)

Importing this module imports ``litellm`` (``pip install 'ctxledger[integrations]'``). Unless
``LITELLM_LOCAL_MODEL_COST_MAP`` is already set, it is set to ``True`` first, so LiteLLM reads
its bundled model cost map instead of fetching it from the internet at import.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm
from openai import OpenAIError

from ctxledger.adapters.engine import BuildResult, ContextEngine
from ctxledger.adapters.integrations.async_engine import AsyncContextEngine
from ctxledger.adapters.integrations.litellm_stream import AsyncBookedStream, BookedStream
from ctxledger.adapters.integrations.turns import (
    build_for,
    in_context,
    output_stub,
    record_tool_outputs,
    tool_item_id,
)
from ctxledger.domain import events as ev
from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.render import CacheTTL

__all__ = [
    "acompletion",
    "completion",
    "completion_kwargs",
    "report_response",
    "request_shape",
    "stub_outputs",
    "tool_outputs",
]

Shape = Literal["anthropic", "openai"]


def request_shape(model: str) -> Shape:
    """``anthropic`` for a LiteLLM model routed to Anthropic (``anthropic/…`` or a bare
    ``claude-…``), else ``openai`` (any other route takes plain OpenAI chat messages)."""
    name = model.strip().lower()
    if name.startswith(("anthropic/", "claude-")):
        return "anthropic"
    return "openai"


def _sync(engine: ContextEngine | AsyncContextEngine) -> ContextEngine:
    return engine.engine if isinstance(engine, AsyncContextEngine) else engine


def completion_kwargs(
    engine: ContextEngine | AsyncContextEngine,
    result: BuildResult,
    model: str,
    *,
    messages: Sequence[Any] | None = None,
    tools: Sequence[Any] | None = None,
    max_tokens: int | None = None,
    cache_ttl: CacheTTL | None = None,
    prompt_cache_key: str | None = None,
    provider: Shape | None = None,
) -> dict[str, Any]:
    """``litellm.completion(**kwargs)`` arguments for a built prompt: ``model``, ``messages``
    (the engine's prompt first, then the caller's *messages* in OpenAI chat format), ``tools``
    when given (OpenAI's function shape; a tool's ``cache_control`` is kept for Anthropic),
    ``max_tokens`` (always for Anthropic, whose renderer defaults it to 4096; for others only
    when given), ``prompt_cache_key`` (OpenAI's, not for Anthropic) when given.
    *provider* overrides :func:`request_shape`. Add your own LiteLLM arguments (``api_base``,
    ``temperature``…) to the dict. Raises InvalidInputError as ``engine.render`` does (e.g.
    ``cache_ttl`` for an OpenAI model)."""
    eng = _sync(engine)
    shape = provider or request_shape(model)
    kwargs: dict[str, Any]
    if shape == "anthropic":
        if prompt_cache_key is not None:
            raise InvalidInputError("prompt_cache_key is OpenAI's; Anthropic has none")
        anthropic = eng.render(
            result,
            "anthropic",
            model,
            max_tokens=4096 if max_tokens is None else max_tokens,
            messages=messages,
            tools=tools,
            cache_ttl=cache_ttl,
        )
        system = anthropic.get("system", [])
        prefix = [{"role": "system", "content": list(system)}] if system else []
        kwargs = {
            "model": model,
            "messages": [*prefix, *anthropic["messages"]],
            "max_tokens": anthropic["max_tokens"],
        }
        if "tools" in anthropic:
            kwargs["tools"] = anthropic["tools"]
        return kwargs
    if cache_ttl is not None:
        raise InvalidInputError(f"cache_ttl is Anthropic's; {model} is sent OpenAI's shape")
    chat = eng.render(
        result, "openai", model, messages=messages, tools=tools, prompt_cache_key=prompt_cache_key
    )
    kwargs = dict(chat)
    if max_tokens is not None:
        kwargs["max_tokens"] = max_tokens
    return kwargs


def _usage_of(response: Any) -> Any:
    usage = getattr(response, "usage", None)
    if usage is None and isinstance(response, Mapping):
        usage = response.get("usage")
    return response if usage is None else usage


def report_response(
    engine: ContextEngine, agent_id: str, response: Any, *, provider: str | None = None
) -> ev.CacheUsageRecorded:
    """Report a LiteLLM response's ``usage`` (a ``ModelResponse``, or its ``Usage``) to the
    engine, booked under *provider* (the call's: ``request_shape`` of its model, or the
    ``provider`` it was shaped for); see ``ContextEngine.report_usage``."""
    return engine.report_usage(agent_id, _usage_of(response), provider=provider)


def completion(
    engine: ContextEngine,
    agent_id: str,
    model: str,
    *,
    messages: Sequence[Any] | None = None,
    tools: Sequence[Any] | None = None,
    build: Mapping[str, Any] | None = None,
    max_tokens: int | None = None,
    cache_ttl: CacheTTL | None = None,
    prompt_cache_key: str | None = None,
    provider: Shape | None = None,
    **litellm_kwargs: Any,
) -> Any:
    """One turn through ``litellm.completion``: build *agent_id*'s prompt (with *build*'s
    ``engine.build`` arguments), call the model with :func:`completion_kwargs` plus
    *litellm_kwargs* (``api_base``, ``temperature``…), report the response's usage and return
    the response. With ``stream=True`` the stream is returned (a :class:`BookedStream`, which
    iterates as LiteLLM's does; ``stream_options.include_usage`` is set) and its usage is
    booked when the caller has read it to its end. A LiteLLM error goes to ``engine.on_turn_error``: a context-limit error
    refreshes the agent (a new generation, a smaller pack) and the call is made again with the
    refreshed prompt (refreshes that make no progress end in RefreshExhaustedError); any
    other error is recorded and raised as it is. The ``tool`` messages among *messages* are
    recorded into the agent's pool first (once each, as every adapter does), and one whose
    output the built prompt holds is sent as a stub (:func:`stub_outputs`)."""
    record_tool_outputs(engine, agent_id, tool_outputs(messages or ()))
    result = build_for(engine, agent_id, dict(build or {}))
    while True:
        kwargs = completion_kwargs(
            engine,
            result,
            model,
            messages=stub_outputs(agent_id, result, messages),
            tools=tools,
            max_tokens=max_tokens,
            cache_ttl=cache_ttl,
            prompt_cache_key=prompt_cache_key,
            provider=provider,
        )
        try:
            response = litellm.completion(**kwargs, **_with_usage(litellm_kwargs))
        except OpenAIError as exc:  # every LiteLLM API error derives from it
            outcome = engine.on_turn_error(agent_id, exc, provider=_provider_of(exc))
            if outcome.result is None:
                raise
            result = outcome.result
            continue
        booked = provider or request_shape(model)
        if litellm_kwargs.get("stream"):
            return BookedStream(response, engine, agent_id, provider=booked)
        report_response(engine, agent_id, response, provider=booked)
        return response


async def acompletion(
    engine: AsyncContextEngine,
    agent_id: str,
    model: str,
    *,
    messages: Sequence[Any] | None = None,
    tools: Sequence[Any] | None = None,
    build: Mapping[str, Any] | None = None,
    max_tokens: int | None = None,
    cache_ttl: CacheTTL | None = None,
    prompt_cache_key: str | None = None,
    provider: Shape | None = None,
    **litellm_kwargs: Any,
) -> Any:
    """:func:`completion` on an event loop: ``litellm.acompletion`` with an
    :class:`AsyncContextEngine` (the engine's calls run on its worker thread)."""
    await engine.call(record_tool_outputs, engine.engine, agent_id, tool_outputs(messages or ()))
    result = await engine.build(agent_id, **dict(build or {}))
    while True:
        kwargs = completion_kwargs(
            engine,
            result,
            model,
            messages=stub_outputs(agent_id, result, messages),
            tools=tools,
            max_tokens=max_tokens,
            cache_ttl=cache_ttl,
            prompt_cache_key=prompt_cache_key,
            provider=provider,
        )
        try:
            response = await litellm.acompletion(**kwargs, **_with_usage(litellm_kwargs))
        except OpenAIError as exc:
            outcome = await engine.on_turn_error(agent_id, exc, provider=_provider_of(exc))
            if outcome.result is None:
                raise
            result = outcome.result
            continue
        booked = provider or request_shape(model)
        if litellm_kwargs.get("stream"):
            return AsyncBookedStream(response, engine, agent_id, provider=booked)
        await engine.report_usage(agent_id, _usage_of(response), provider=booked)
        return response


def _with_usage(litellm_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """*litellm_kwargs*, with ``stream_options.include_usage`` on when streaming (the usage
    then comes with the stream's last chunk)."""
    kwargs = dict(litellm_kwargs)
    if kwargs.get("stream"):
        kwargs["stream_options"] = {
            **dict(kwargs.get("stream_options") or {}),
            "include_usage": True,
        }
    return kwargs


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: keep their text
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return "" if content is None else str(content)


def tool_outputs(messages: Sequence[Any]) -> list[tuple[str, str]]:
    """``(tool_call_id, text)`` of every OpenAI-format ``tool`` message in *messages*."""
    return [
        (str(m.get("tool_call_id")), _content_text(m.get("content")))
        for m in messages
        if isinstance(m, Mapping) and m.get("role") == "tool"
    ]


def stub_outputs(
    agent_id: str, result: BuildResult, messages: Sequence[Any] | None
) -> list[Any] | None:
    """*messages* with each ``tool`` message whose output *result*'s prompt holds replaced by
    a stub (``turns.output_stub``): the call stays paired with a result, the output is sent
    once, in the prompt."""
    if messages is None:
        return None
    chosen = in_context(result)
    out: list[Any] = []
    for m in messages:
        if isinstance(m, Mapping) and m.get("role") == "tool":
            item_id = tool_item_id(agent_id, str(m.get("tool_call_id")))
            if item_id in chosen:
                m = {**m, "content": output_stub(item_id)}
        out.append(m)
    return out


def _provider_of(error: BaseException) -> str:
    """The provider LiteLLM names on its exceptions (``llm_provider``), "" when none."""
    provider = getattr(error, "llm_provider", "")
    return provider if isinstance(provider, str) else ""
