"""Framework adapters: ctxledger as the context of agents written with other frameworks.

Each module imports its framework lazily (install ``ctxledger[integrations]``):

- ``openai_agents``: a ``RunConfig.call_model_input_filter`` and ``RunHooks`` reporting usage,
  for the OpenAI Agents SDK;
- ``langgraph``: a ``pre_model_hook`` for LangGraph's ``create_react_agent``;
- ``litellm_calls``: ``litellm.completion`` kwargs from a build, usage and context-limit
  errors back to the engine, and a whole turn (``completion`` / ``acompletion``);
- ``async_engine``: ``AsyncContextEngine``, the engine's API awaitable from an event loop.

See docs/integrations.md.
"""
