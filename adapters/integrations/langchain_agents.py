"""LangChain 1.x agents (``langchain.agents.create_agent``) with ctxledger as their context.

``ContextMiddleware`` wraps every model call: it records the ``ToolMessage`` outputs the
agent's state holds that the pool does not, builds the agent's next prompt, and calls the
model with the agent's own system prompt followed by the engine's prompt and only the
conversation's current turn; the agent's state keeps the whole conversation.

    agent = create_agent(model, tools, system_prompt="You are a careful engineer.",
                         middleware=[ContextMiddleware(engine, "worker-1")])
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest
from langchain_core.messages import SystemMessage

from ctxledger.adapters.engine import ContextEngine
from ctxledger.adapters.integrations.langgraph import shape_messages

__all__ = ["ContextMiddleware"]


class ContextMiddleware(AgentMiddleware[Any, Any]):
    """Middleware putting *agent_id*'s ctxledger prompt in front of every model call. *build*
    holds ``engine.build`` arguments used for every build."""

    def __init__(self, engine: ContextEngine, agent_id: str, **build: Any) -> None:
        super().__init__()
        self.engine = engine
        self.agent_id = agent_id
        self.build = build
        self.last: Any = None
        """The last BuildResult."""

    def _shaped(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        result, turn = shape_messages(self.engine, self.agent_id, self.build, request.messages)
        self.last = result
        own = request.system_message.text if request.system_message is not None else ""
        text = f"{own}\n\n{result.prompt.text}" if own else result.prompt.text
        return request.override(messages=turn, system_message=SystemMessage(content=text))

    def wrap_model_call(self, request: ModelRequest[Any], handler: Callable[..., Any]) -> Any:
        return handler(self._shaped(request))

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[..., Awaitable[Any]]
    ) -> Any:
        return await handler(self._shaped(request))
