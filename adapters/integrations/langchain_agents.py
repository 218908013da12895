"""LangChain 1.x agents (``langchain.agents.create_agent``) with ctxledger as their context.

``ContextMiddleware`` wraps every model call: it records the ``ToolMessage`` outputs the
agent's state holds that the pool does not, builds the agent's next prompt, and calls the
model with the agent's own system prompt followed by the engine's prompt and only the
conversation's current turn; the agent's state keeps the whole conversation. The system
message is two blocks, the agent's own prompt with the static prefix first (with
``cache_control`` for Anthropic), the dynamic part second; an OpenAI model gets a
``prompt_cache_key`` per agent (unless the call sets one). A tool output the prompt holds is
sent once: in the turn its result is a short stub (``langgraph.shape_messages``).

    agent = create_agent(model, tools, system_prompt="You are a careful engineer.",
                         middleware=[ContextMiddleware(engine, "worker-1")])
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest

from ctxledger.adapters.engine import ContextEngine
from ctxledger.adapters.integrations.langgraph import (
    prompt_cache_key,
    shape_messages,
    system_message,
)

__all__ = ["ContextMiddleware", "chat_model_provider"]


def chat_model_provider(model: Any) -> str | None:
    """The provider a LangChain chat model calls, read from its package
    (``langchain_anthropic`` → ``anthropic``, ``langchain_openai`` → ``openai``); None for
    any other (then no cache marker nor cache key is added unless the middleware is given a
    ``provider``)."""
    package = type(model).__module__.split(".")[0]
    return {"langchain_anthropic": "anthropic", "langchain_openai": "openai"}.get(package)


class ContextMiddleware(AgentMiddleware[Any, Any]):
    """Middleware putting *agent_id*'s ctxledger prompt in front of every model call. *build*
    holds ``engine.build`` arguments used for every build."""

    def __init__(
        self, engine: ContextEngine, agent_id: str, *, provider: str | None = None, **build: Any
    ) -> None:
        super().__init__()
        self.engine = engine
        self.agent_id = agent_id
        self.provider = provider
        self.build = build
        self.last: Any = None
        """The last BuildResult."""

    def _shaped(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        result, turn = shape_messages(self.engine, self.agent_id, self.build, request.messages)
        self.last = result
        own = request.system_message.text if request.system_message is not None else ""
        provider = self.provider or chat_model_provider(request.model)
        system = system_message(result, own, provider=provider)
        settings = dict(request.model_settings)
        if provider == "openai":
            settings.setdefault("prompt_cache_key", prompt_cache_key(self.agent_id))
        return request.override(messages=turn, system_message=system, model_settings=settings)

    def wrap_model_call(self, request: ModelRequest[Any], handler: Callable[..., Any]) -> Any:
        return handler(self._shaped(request))

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[..., Awaitable[Any]]
    ) -> Any:
        return await handler(self._shaped(request))
