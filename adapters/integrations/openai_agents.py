"""The OpenAI Agents SDK with ctxledger as its context.

``ContextInputFilter`` is a ``RunConfig.call_model_input_filter``: before each model call it
records the tool outputs the agent got since the previous call, builds the agent's next
prompt, and sends the agent's own instructions followed by that prompt as the instructions,
with only the conversation's current turn as input. ``UsageHooks`` reports each model call's
usage to the engine (``report_usage``). A context-limit error surfaces from ``Runner.run`` as
the SDK's ``BadRequestError``: pass it to ``engine.on_turn_error`` and run again.

    engine = ContextEngine.open("sqlite:///ledger.db")
    run_config = RunConfig(call_model_input_filter=ContextInputFilter(engine, "worker-1"))
    Runner.run_sync(agent, "Fix the failing test", run_config=run_config,
                    hooks=UsageHooks(engine, "worker-1"))

The filter calls the engine synchronously (a local SQLite write per call); an orchestrator
on an event loop that must not block uses ``AsyncContextEngine`` around its own calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agents import RunHooks
from agents.run import CallModelData, ModelInputData

from ctxledger.adapters.engine import ContextEngine
from ctxledger.adapters.integrations.turns import (
    ToolOutput,
    build_for,
    current_turn,
    record_tool_outputs,
)

__all__ = ["ContextInputFilter", "UsageHooks"]


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


class ContextInputFilter:
    """A ``call_model_input_filter`` putting *agent_id*'s ctxledger prompt in front of every
    model call. *build* holds ``engine.build`` arguments (``keywords``, ``files``,
    ``stage_id``…) used for every build."""

    def __init__(self, engine: ContextEngine, agent_id: str, **build: Any) -> None:
        self.engine = engine
        self.agent_id = agent_id
        self.build = build
        self.last: Any = None
        """The last BuildResult (its pack, prompt and generation)."""

    def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        items = list(data.model_data.input)
        record_tool_outputs(self.engine, self.agent_id, tool_outputs(items))
        result = self.last = build_for(self.engine, self.agent_id, self.build)
        own = data.model_data.instructions
        instructions = f"{own}\n\n{result.prompt.text}" if own else result.prompt.text
        return ModelInputData(input=current_turn(items, _is_user), instructions=instructions)


class UsageHooks(RunHooks[Any]):
    """``RunHooks`` reporting each model response's usage to the engine."""

    def __init__(self, engine: ContextEngine, agent_id: str) -> None:
        self.engine = engine
        self.agent_id = agent_id

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        self.engine.report_usage(self.agent_id, response.usage)
