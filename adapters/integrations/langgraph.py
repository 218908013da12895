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

LangGraph 1.x deprecates ``create_react_agent`` for LangChain's ``create_agent``; its
middleware is ``langchain_agents.ContextMiddleware``, which shapes the model call the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage, ToolMessage

from ctxledger.adapters.engine import ContextEngine
from ctxledger.adapters.integrations.turns import build_for, current_turn, record_tool_outputs
from ctxledger.adapters.usage_types import read_langchain_usage
from ctxledger.domain import events as ev
from ctxledger.domain.errors import InvalidInputError

__all__ = ["ContextHook", "message_provider", "report_message_usage", "shape_messages"]


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
    return ``(BuildResult, the conversation's current turn)``."""
    outputs = [(str(m.tool_call_id), _text(m)) for m in messages if isinstance(m, ToolMessage)]
    record_tool_outputs(engine, agent_id, outputs)
    result = build_for(engine, agent_id, build)
    return result, current_turn(messages, lambda m: isinstance(m, HumanMessage))


class ContextHook:
    """A ``pre_model_hook`` putting *agent_id*'s ctxledger prompt in front of every model
    call. *build* holds ``engine.build`` arguments used for every build."""

    def __init__(self, engine: ContextEngine, agent_id: str, **build: Any) -> None:
        self.engine = engine
        self.agent_id = agent_id
        self.build = build
        self.last: Any = None
        """The last BuildResult."""

    def __call__(self, state: Mapping[str, Any]) -> dict[str, Any]:
        result, turn = shape_messages(
            self.engine, self.agent_id, self.build, list(state["messages"])
        )
        self.last = result
        return {"llm_input_messages": [SystemMessage(content=result.prompt.text), *turn]}


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
