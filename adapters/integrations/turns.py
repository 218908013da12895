"""What every framework adapter does on a model call: record the tool outputs the agent saw
since the last call, build the agent's next prompt, and keep only the conversation's current
turn (earlier turns reach the model through the engine's context, chosen under the budget)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from ctxledger.adapters.engine import BuildResult, ContextEngine
from ctxledger.domain.model import Layer, Source

__all__ = [
    "ToolOutput",
    "current_turn",
    "in_context",
    "output_stub",
    "record_tool_outputs",
    "tool_item_id",
]

T = TypeVar("T")

ToolOutput = tuple[str, str]
"""``(call id, output text)`` of one tool call."""


def tool_item_id(agent_id: str, call_id: str) -> str:
    """The pool id of one tool call's output: recording it again is a no-op."""
    return f"tool:{agent_id}:{call_id}"


def record_tool_outputs(engine: ContextEngine, agent_id: str, outputs: Iterable[ToolOutput]) -> int:
    """Record each tool output the agent's pool does not hold yet (L0 tool log); returns how
    many were new."""
    pool = engine.pool(agent_id)
    new = 0
    for call_id, text in outputs:
        item_id = tool_item_id(agent_id, call_id)
        if not text or item_id in pool.items:
            continue
        engine.record(agent_id, text, layer=Layer.L0, source=Source.TOOL_LOG, item_id=item_id)
        new += 1
    return new


def output_stub(item_id: str) -> str:
    """What a tool result says in place of an output the prompt already holds: the call stays
    paired with a result, as the providers require, and the output is sent once."""
    return f"[output recorded as {item_id}; it is in the context above]"


def in_context(result: BuildResult) -> frozenset[str]:
    """The ids of the items *result*'s pack put in the prompt."""
    return frozenset(item.id for item in result.pack.items)


def current_turn(items: Sequence[T], is_user: Callable[[T], bool]) -> list[T]:
    """The conversation from its last user message on (all of it when there is none): the
    pending tool calls and their outputs stay paired, as the providers require."""
    for k in range(len(items) - 1, -1, -1):
        if is_user(items[k]):
            return list(items[k:])
    return list(items)


def build_for(engine: ContextEngine, agent_id: str, build: dict[str, Any]) -> BuildResult:
    """The agent's next build with the adapter's fixed build arguments."""
    return engine.build(agent_id, **build)
