"""LangGraph with ctxledger as its context.

``ContextHook`` is a ``pre_model_hook`` for ``langgraph.prebuilt.create_react_agent``: before
each model call it records the ``ToolMessage`` outputs the graph's state holds that the pool
does not, builds the agent's next prompt, and returns ``llm_input_messages`` — the prompt as
a system message, then the conversation's current turn — so the graph's own ``messages``
state is left untouched. Usage comes back on each ``AIMessage.usage_metadata`` (every chat
model fills it, streaming or not): ``report_message_usage`` books it with its cache reads and
writes (``input_token_details``) under the provider that answered
(``response_metadata["model_provider"]``, which LangChain's chat models set; *provider*
when given).

    hook = ContextHook(engine, "worker-1")
    graph = create_react_agent(model, tools, pre_model_hook=hook)
    state = graph.invoke({"messages": [("user", "Fix the failing test")]})
    report_message_usage(engine, "worker-1", state["messages"][-1])

LangGraph 1.x deprecates ``create_react_agent`` for LangChain's ``create_agent`` (built on
LangGraph); its hook is middleware, ``langchain_agents.ContextMiddleware``, which shapes the
model call the same way and is the one to use on LangGraph 1.x.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage, ToolMessage

from ctxledger.adapters.engine import BuildResult, ContextEngine
from ctxledger.adapters.integrations.turns import (
    build_for,
    current_turn,
    in_context,
    output_stub,
    record_tool_outputs,
    tool_item_id,
)
from ctxledger.adapters.usage_types import read_langchain_usage
from ctxledger.domain import events as ev
from ctxledger.domain.errors import InvalidInputError

__all__ = [
    "ContextHook",
    "message_provider",
    "prompt_cache_key",
    "report_message_usage",
    "shape_messages",
    "system_message",
]


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "\n".join(
        str(p.get("text", "")) if isinstance(p, Mapping) else str(p) for p in content
    ).strip()


M = TypeVar("M", bound=BaseMessage)


def shape_messages(
    engine: ContextEngine, agent_id: str, build: dict[str, Any], messages: Sequence[M]
) -> tuple[Any, list[M]]:
    """Record the ``ToolMessage`` outputs of *messages* the pool does not hold, build, and
    return ``(BuildResult, the conversation's current turn)``; in the turn, a tool output the
    build put in the prompt is replaced by a short stub (``turns.output_stub``), so it is
    sent once, in the context."""
    outputs = [(str(m.tool_call_id), _text(m)) for m in messages if isinstance(m, ToolMessage)]
    record_tool_outputs(engine, agent_id, outputs)
    result = build_for(engine, agent_id, build)
    chosen = in_context(result)
    turn = current_turn(messages, lambda m: isinstance(m, HumanMessage))
    return result, [_stubbed(m, agent_id, chosen) for m in turn]


def _stubbed(message: M, agent_id: str, chosen: frozenset[str]) -> M:
    if not isinstance(message, ToolMessage):
        return message
    item_id = tool_item_id(agent_id, str(message.tool_call_id))
    if item_id not in chosen:
        return message
    return message.model_copy(update={"content": output_stub(item_id)})


def system_message(result: BuildResult, own: str = "", *, provider: str | None) -> SystemMessage:
    """The system message of a model call: *own* (the agent's own system prompt) and the
    prompt's static prefix as one text block, the dynamic part as a second one. For
    ``provider="anthropic"`` the first block carries ``cache_control`` (the prefix is cached
    on its own; LangChain's Anthropic model and an OpenAI-compatible proxy such as LiteLLM's
    pass it on), so what changes every call comes after the breakpoint."""
    head = f"{own}\n\n{result.prompt.static}" if own else result.prompt.static
    first: dict[str, Any] = {"type": "text", "text": head}
    if provider == "anthropic":
        first["cache_control"] = {"type": "ephemeral"}
    blocks: list[str | dict[str, Any]] = [first]
    if result.prompt.dynamic:
        blocks.append({"type": "text", "text": result.prompt.dynamic})
    return SystemMessage(content=blocks)


def prompt_cache_key(agent_id: str) -> str:
    """OpenAI's ``prompt_cache_key`` of an agent's calls: one per agent, so its calls, which
    share the static prefix, are routed to the same cache."""
    return f"ctxledger:{agent_id}"[:64]


class ContextHook:
    """A ``pre_model_hook`` putting *agent_id*'s ctxledger prompt in front of every model
    call (:func:`system_message`: *system_prompt* and the static prefix a block of its own,
    cached for ``provider="anthropic"``). Give the agent's own prompt here, not as
    ``create_react_agent(prompt=…)``, which would send a second system message. *build*
    holds ``engine.build`` arguments used for every build."""

    def __init__(
        self,
        engine: ContextEngine,
        agent_id: str,
        *,
        system_prompt: str = "",
        provider: str | None = None,
        **build: Any,
    ) -> None:
        self.engine = engine
        self.agent_id = agent_id
        self.system_prompt = system_prompt
        self.provider = provider
        self.build = build
        self.last: Any = None
        """The last BuildResult."""

    def __call__(self, state: Mapping[str, Any]) -> dict[str, Any]:
        result, turn = shape_messages(
            self.engine, self.agent_id, self.build, list(state["messages"])
        )
        self.last = result
        system = system_message(result, self.system_prompt, provider=self.provider)
        return {"llm_input_messages": [system, *turn]}


def message_provider(message: BaseMessage) -> str:
    """The provider that answered, as the chat model recorded it on the message
    (``response_metadata["model_provider"]``); raises InvalidInputError when it is not there
    (then pass the provider yourself)."""
    provider = message.response_metadata.get("model_provider")
    if not isinstance(provider, str) or not provider:
        raise InvalidInputError(
            "the message names no model_provider in its response_metadata; pass provider="
        )
    return provider


def report_message_usage(
    engine: ContextEngine, agent_id: str, message: BaseMessage, *, provider: str | None = None
) -> ev.CacheUsageRecorded:
    """Book an ``AIMessage``'s ``usage_metadata`` (``input_token_details.cache_read`` and
    ``.cache_creation`` as cache reads and writes) to *agent_id*, under *provider* or the
    message's own (:func:`message_provider`). Raises InvalidInputError when the message
    carries no usage."""
    usage = getattr(message, "usage_metadata", None)
    if usage is None:
        raise InvalidInputError(f"the {type(message).__name__} carries no usage_metadata")
    chosen = provider or message_provider(message)
    return engine.report_usage(agent_id, read_langchain_usage(usage, provider=chosen))
