"""Pydantic AI with ctxledger as its context: a ``history_processors`` entry.

``ContextHistory`` is a history processor (Pydantic AI 2.x:
``Agent(..., capabilities=[ProcessHistory(hook)])``; 1.x: ``history_processors=[hook]``): before
each model request it records the ``ToolReturnPart`` outputs of the message history that the
pool does not hold, builds the agent's next prompt, and returns only the conversation's
current turn (from the last request holding a ``UserPromptPart`` on) with the engine's prompt
as a ``SystemPromptPart`` at its head; a tool output the prompt holds is a short stub in the
turn (sent once). Pydantic AI keeps the processed history as the run's, so the run's
messages hold the current turn with those stubs; the whole conversation is in the ledger.
``report_run_usage`` books a run's ``RunUsage`` (its ``input_tokens``
include ``cache_read_tokens`` and ``cache_write_tokens``) under the provider the caller
names.

    hook = ContextHistory(engine, "worker-1", keywords=["auth"])
    agent = Agent(model, capabilities=[ProcessHistory(hook)])
    result = agent.run_sync("Fix the failing test")
    report_run_usage(engine, "worker-1", result.usage, provider="anthropic")

Importing this module imports ``pydantic_ai`` (``pip install pydantic-ai-slim``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    SystemPromptPart,
    ToolReturnPart,
    UserPromptPart,
)

from ctxledger.adapters.engine import ContextEngine
from ctxledger.adapters.integrations.turns import (
    build_for,
    current_turn,
    in_context,
    output_stub,
    record_tool_outputs,
    tool_item_id,
)
from ctxledger.domain import events as ev

__all__ = ["ContextHistory", "report_run_usage"]


def _is_user(message: ModelMessage) -> bool:
    return isinstance(message, ModelRequest) and any(
        isinstance(p, UserPromptPart) for p in message.parts
    )


def _outputs(messages: list[ModelMessage]) -> list[tuple[str, str]]:
    return [
        (str(part.tool_call_id), part.model_response_str())
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]


class ContextHistory:
    """A Pydantic AI history processor putting *agent_id*'s ctxledger prompt in front of
    every model request (see the module). *build* holds ``engine.build`` arguments used for
    every build."""

    def __init__(self, engine: ContextEngine, agent_id: str, **build: Any) -> None:
        self.engine = engine
        self.agent_id = agent_id
        self.build = build
        self.last: Any = None
        """The last BuildResult."""
        self._own: dict[str, str] = {}
        """Each system prompt this processor made → the agent's own part of it (Pydantic AI
        keeps the processed history, so the next call sees it again)."""

    def __call__(self, messages: list[ModelMessage]) -> list[ModelMessage]:
        record_tool_outputs(self.engine, self.agent_id, _outputs(messages))
        result = self.last = build_for(self.engine, self.agent_id, self.build)
        chosen = in_context(result)
        turn = [self._stubbed(m, chosen) for m in current_turn(messages, _is_user)]
        if not turn or not isinstance(turn[0], ModelRequest):
            return [ModelRequest(parts=[SystemPromptPart(content=result.prompt.text)]), *turn]
        head = turn[0]
        parts: list[ModelRequestPart] = [
            p for p in head.parts if not isinstance(p, SystemPromptPart)
        ]
        own = [
            self._own.get(p.content, p.content)  # a prompt of ours: the agent's part of it
            for p in head.parts
            if isinstance(p, SystemPromptPart)
        ]
        text = "\n\n".join([*own, result.prompt.text])
        self._own[text] = "\n\n".join(own)
        parts.insert(0, SystemPromptPart(content=text))
        return [dataclasses.replace(head, parts=parts), *turn[1:]]

    def _stubbed(self, message: ModelMessage, chosen: frozenset[str]) -> ModelMessage:
        if not isinstance(message, ModelRequest):
            return message
        parts: list[ModelRequestPart] = []
        for part in message.parts:
            if isinstance(part, ToolReturnPart):  # a function tool's (or a typed tool's) return
                item_id = tool_item_id(self.agent_id, str(part.tool_call_id))
                if item_id in chosen:
                    stub: Any = part  # its content type varies with the tool kind
                    part = dataclasses.replace(stub, content=output_stub(item_id))
            parts.append(part)
        return dataclasses.replace(message, parts=parts)


def report_run_usage(
    engine: ContextEngine, agent_id: str, usage: Any, *, provider: str
) -> ev.CacheUsageRecorded:
    """Book a Pydantic AI ``RunUsage`` / ``RequestUsage`` under *provider* (Pydantic AI
    serves every provider, so the caller names it)."""
    return engine.report_usage(agent_id, usage, provider=provider)
