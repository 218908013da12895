"""The OpenAI Agents SDK with ctxledger as its context.

``ContextInputFilter`` is a ``RunConfig.call_model_input_filter``: before each model call it
records the tool outputs the agent got since the previous call, builds the agent's next
prompt, and sends the agent's own instructions followed by that prompt as the instructions,
with only the conversation's current turn as input (a tool output the prompt holds is a
short stub there: sent once). ``UsageHooks`` reports each model call's
usage to the engine (``report_usage``), under the provider the agent's model calls. In a
handoff each SDK agent can have its own ctxledger agent (``agents={"triage": "t-1", …}``):
its own context and its own usage. Both take a ``ContextEngine`` or an
``AsyncContextEngine``. A context-limit error surfaces from ``Runner.run`` as
the SDK's ``BadRequestError``: pass it to ``engine.on_turn_error`` and run again.
``LedgerSession`` is a ``Session`` whose conversation history is the agent's pool.

    engine = open_engine("sqlite:///ledger.db")
    run_config = RunConfig(call_model_input_filter=ContextInputFilter(engine, "worker-1"))
    Runner.run_sync(agent, "Fix the failing test", run_config=run_config,
                    hooks=UsageHooks(engine, "worker-1"))

With a ``ContextEngine`` the filter calls the engine synchronously (a local SQLite write per
call); with an ``AsyncContextEngine`` it is awaitable and the loop is never blocked.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Mapping
from typing import Any

from agents import ModelSettings, RunHooks
from agents.run import CallModelData, ModelInputData

from ctxledger.adapters.engine import ContextEngine
from ctxledger.adapters.integrations.async_engine import AsyncContextEngine
from ctxledger.adapters.integrations.turns import (
    ToolOutput,
    build_for,
    current_turn,
    in_context,
    output_stub,
    record_tool_outputs,
    tool_item_id,
)
from ctxledger.domain.model import Layer, Source

__all__ = [
    "ContextInputFilter",
    "LedgerSession",
    "UsageHooks",
    "cache_settings",
    "model_provider",
]


def _field(item: Any, key: str) -> Any:
    if isinstance(item, Mapping):
        return item.get(key)
    return getattr(item, key, None)


def _is_user(item: Any) -> bool:
    return _field(item, "role") == "user" and _field(item, "type") in (None, "message")


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):  # content parts: keep their text
        return "\n".join(str(_field(p, "text") or "") for p in output).strip()
    return "" if output is None else str(output)


def tool_outputs(items: list[Any]) -> list[ToolOutput]:
    """``(call_id, text)`` of every ``function_call_output`` input item."""
    return [
        (str(_field(i, "call_id")), _output_text(_field(i, "output")))
        for i in items
        if _field(i, "type") == "function_call_output"
    ]


def _ledger_agent(default: str, agents: Mapping[str, str], sdk_agent: Any) -> str:
    """The ctxledger agent of an SDK agent: *agents* by the SDK agent's name, else *default*."""
    return agents.get(str(getattr(sdk_agent, "name", "")), default)


def cache_settings(agent_id: str, settings: ModelSettings | None = None) -> ModelSettings:
    """*settings* (or new ones) with OpenAI's ``prompt_cache_key`` for *agent_id*
    (``ctxledger:<agent>``, the key the LangChain middleware uses too): the agent's calls,
    which share the static prefix at the head of their instructions, go to one cache across
    runs (the SDK's own key is one per run). A key already in ``extra_args`` is kept. Also
    ``include_usage`` on unless set: a streamed Chat Completions call then reports its usage
    (the SDK asks for it only from api.openai.com, so any other endpoint streams none)."""
    base = settings or ModelSettings()
    extra = dict(base.extra_args or {})
    extra.setdefault("prompt_cache_key", f"ctxledger:{agent_id}"[:64])
    include = True if base.include_usage is None else base.include_usage
    return base.resolve(ModelSettings(extra_args=extra, include_usage=include))


def model_provider(model: Any) -> str:
    """The provider an Agents SDK model calls, read from the model itself: a ``LitellmModel``
    (or a ``"litellm/…"`` name) by its LiteLLM route (``litellm_calls.request_shape``), any
    other model (``OpenAIResponsesModel``, ``OpenAIChatCompletionsModel``, a plain name: the
    SDK's own OpenAI provider) ``openai``."""
    name = model if isinstance(model, str) else None
    if name is None and type(model).__module__.startswith("agents.extensions.models.litellm"):
        name = f"litellm/{getattr(model, 'model', '')}"
    if name is not None and name.startswith("litellm/"):
        route = name.removeprefix("litellm/").strip().lower()
        return "anthropic" if route.startswith(("anthropic/", "claude-")) else "openai"
    return "openai"


class ContextInputFilter:
    """A ``call_model_input_filter`` putting the ctxledger prompt of the agent being run in
    front of every model call: *agent_id*'s, or in a handoff the one *agents* maps the SDK
    agent's name to (each agent its own context). *engine* is a ``ContextEngine`` or an
    ``AsyncContextEngine`` (then the filter is awaitable and its engine calls run on the
    engine's worker thread). *build* holds ``engine.build`` arguments (``keywords``,
    ``files``, ``stage_id``…) used for every build."""

    def __init__(
        self,
        engine: ContextEngine | AsyncContextEngine,
        agent_id: str,
        *,
        agents: Mapping[str, str] | None = None,
        **build: Any,
    ) -> None:
        self.engine = engine
        self.agent_id = agent_id
        self.agents = dict(agents or {})
        self.build = build
        self.last: Any = None
        """The last BuildResult (its pack, prompt and generation)."""

    def __call__(self, data: CallModelData[Any]) -> ModelInputData | Awaitable[ModelInputData]:
        if isinstance(self.engine, AsyncContextEngine):
            return self.engine.call(self._shape, self.engine.engine, data)
        return self._shape(self.engine, data)

    def _shape(self, engine: ContextEngine, data: CallModelData[Any]) -> ModelInputData:
        agent_id = _ledger_agent(self.agent_id, self.agents, data.agent)
        items = list(data.model_data.input)
        record_tool_outputs(engine, agent_id, tool_outputs(items))
        result = self.last = build_for(engine, agent_id, self.build)
        own = data.model_data.instructions
        instructions = f"{own}\n\n{result.prompt.text}" if own else result.prompt.text
        chosen = in_context(result)
        turn = [_stubbed(i, agent_id, chosen) for i in current_turn(items, _is_user)]
        return ModelInputData(input=turn, instructions=instructions)


def _stubbed(item: Any, agent_id: str, chosen: frozenset[str]) -> Any:
    """A ``function_call_output`` whose output the prompt holds, with a stub as its output
    (sent once, in the context); any other item as it is."""
    if _field(item, "type") != "function_call_output":
        return item
    item_id = tool_item_id(agent_id, str(_field(item, "call_id")))
    if item_id not in chosen:
        return item
    data = dict(item) if isinstance(item, Mapping) else item.model_dump(exclude_unset=True)
    return {**data, "output": output_stub(item_id)}


class UsageHooks(RunHooks[Any]):
    """``RunHooks`` reporting each model response's usage to the engine (a response that
    reports no tokens at all, as a stream without a usage chunk, counts as a call that went
    through, ``turn_succeeded``: never an all-zero booking), booked to the agent that made
    the call (*agents* as in :class:`ContextInputFilter`) under the provider its
    model calls (:func:`model_provider`; *provider* overrides it, e.g. an OpenAI-compatible
    endpoint serving another provider's model). *engine* may be an ``AsyncContextEngine``."""

    def __init__(
        self,
        engine: ContextEngine | AsyncContextEngine,
        agent_id: str,
        *,
        agents: Mapping[str, str] | None = None,
        provider: str | None = None,
    ) -> None:
        self.engine = engine
        self.agent_id = agent_id
        self.agents = dict(agents or {})
        self.provider = provider

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        agent_id = _ledger_agent(self.agent_id, self.agents, agent)
        provider = self.provider or model_provider(getattr(agent, "model", None))
        usage = response.usage
        reported = bool(getattr(usage, "input_tokens", 0) or getattr(usage, "output_tokens", 0))
        if isinstance(self.engine, AsyncContextEngine):
            if reported:
                await self.engine.report_usage(agent_id, usage, provider=provider)
            else:
                await self.engine.turn_succeeded(agent_id)
        elif reported:
            self.engine.report_usage(agent_id, usage, provider=provider)
        else:
            self.engine.turn_succeeded(agent_id)


class LedgerSession:
    """An Agents SDK ``Session`` whose history is the agent's pool in the ledger, so it
    survives restarts, is shared by every process on the store, shows in the inspector and
    replays with everything else.

    ``add_items`` records each conversation item into the pool: a user message as an L1
    conversation item, an assistant message as an L0 one, a tool call as ``name(arguments)``,
    a tool output under the same id ``ContextInputFilter`` gives it (recorded once, whichever
    sees it first), any other item as its JSON. ``get_items`` rebuilds the items from the pool
    in the order they were added, each tool output right after its call, leaving out what was
    removed (``pop_item``, ``clear_session``, the inspector's ``remove``). Text is stored as
    the engine stores it: a secret in a message is redacted under the agent's policy.

    With ``ContextInputFilter`` on the same agent, the model sees the current turn plus the
    engine's prompt, in which earlier turns compete under the budget like every other item.
    """

    def __init__(self, engine: ContextEngine, agent_id: str, session_id: str = "") -> None:
        self.engine = engine
        self.agent_id = agent_id
        self.session_id = session_id or agent_id
        self.session_settings: Any = None
        self._prefix = f"session:{self.session_id}:"

    def _ids(self) -> list[tuple[int, str, str, str]]:
        """``(n, kind, call id or "", item id)`` of this session's live items, in the order
        they were added."""
        pool = self.engine.pool(self.agent_id)
        found = []
        for item_id in pool.items:
            if item_id.startswith(self._prefix) and item_id not in pool.removed:
                n, kind, rest = item_id[len(self._prefix) :].split(":", 2)
                found.append((int(n), kind, rest if kind == "call" else "", item_id))
        return sorted(found)

    def _remove(self, item_id: str, reason: str) -> None:
        self.engine.remove(self.agent_id, item_id, reason=reason)

    def _as_items(self) -> list[Any]:
        pool = self.engine.pool(self.agent_id)
        out: list[Any] = []
        for _n, kind, call_id, item_id in self._ids():
            text = pool.items[item_id].content
            if kind in ("user", "assistant"):
                out.append({"role": kind, "content": text})
            elif kind == "call":
                name, _, args = text.partition("(")
                out.append(
                    {
                        "type": "function_call",
                        "call_id": call_id,
                        "name": name,
                        "arguments": args[:-1],
                    }
                )
                output = tool_item_id(self.agent_id, call_id)
                if output in pool.items and output not in pool.removed:
                    text = pool.items[output].content
                    out.append({"type": "function_call_output", "call_id": call_id, "output": text})
            else:
                out.append(json.loads(text))
        return out

    async def get_items(self, limit: int | None = None) -> list[Any]:
        items = self._as_items()
        return items if limit is None else items[-limit:] if limit > 0 else []

    async def add_items(self, items: list[Any]) -> None:
        taken = self._ids()
        n = taken[-1][0] + 1 if taken else 0
        pool = self.engine.pool(self.agent_id)
        for item in items:
            kind, text, extra = _session_entry(item)
            if kind == "output":
                call_id, output = extra, text
                item_id = tool_item_id(self.agent_id, call_id)
                if output and item_id not in pool.items:
                    record_tool_outputs(self.engine, self.agent_id, [(call_id, output)])
                continue
            if not text:
                continue
            item_id = f"{self._prefix}{n:08d}:{kind}:{extra if kind == 'call' else ''}"
            layer = Layer.L1 if kind == "user" else Layer.L0
            self.engine.record(
                self.agent_id, text, layer=layer, source=Source.CONVERSATION, item_id=item_id
            )
            n += 1

    async def pop_item(self) -> Any | None:
        ids = self._ids()
        if not ids:
            return None
        last = self._as_items()[-1]
        if last.get("type") == "function_call_output":  # the newest item is a call's output
            self._remove(tool_item_id(self.agent_id, last["call_id"]), "session pop")
        else:
            self._remove(ids[-1][3], "session pop")
        return last

    async def clear_session(self) -> None:
        for item in self._as_items():
            if item.get("type") == "function_call_output":
                self._remove(tool_item_id(self.agent_id, item["call_id"]), "session cleared")
        for *_, item_id in self._ids():
            self._remove(item_id, "session cleared")


def _session_entry(item: Any) -> tuple[str, str, str]:
    """``(kind, text, extra)`` of one input item: kind ``user``/``assistant``/``call``/
    ``output``/``item``; extra is the call id for calls and outputs."""
    kind = _field(item, "type")
    role = _field(item, "role")
    if kind in (None, "message") and role in ("user", "assistant"):
        content = _field(item, "content")
        text = content if isinstance(content, str) else _output_text(content)
        return str(role), text, ""
    if kind == "function_call":
        call_id = str(_field(item, "call_id"))
        return "call", f"{_field(item, 'name')}({_field(item, 'arguments') or ''})", call_id
    if kind == "function_call_output":
        return "output", _output_text(_field(item, "output")), str(_field(item, "call_id"))
    data = item if isinstance(item, Mapping) else getattr(item, "model_dump", lambda: item)()
    return "item", json.dumps(data, sort_keys=True, default=str), ""
