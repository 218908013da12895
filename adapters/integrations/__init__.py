"""Framework adapters: ctxledger as the context of agents written with other frameworks.

Each module imports its framework lazily (install ``ctxledger[integrations]``):

- ``openai_agents``: a ``RunConfig.call_model_input_filter`` and ``RunHooks`` reporting usage,
  for the OpenAI Agents SDK (sync or async engine, one ctxledger agent per SDK agent);
- ``langgraph``: a ``pre_model_hook`` for LangGraph's ``create_react_agent`` and the
  LangChain ``usage_metadata`` booking (``report_message_usage``);
- ``langchain_agents``: middleware for LangChain's ``create_agent``;
- ``pydantic_ai_history``: a Pydantic AI history processor;
- ``litellm_calls``: ``litellm.completion`` kwargs from a build, usage and context-limit
  errors back to the engine, and a whole turn (``completion`` / ``acompletion``), streamed
  or not (``litellm_stream``);
- ``turns``: what every adapter does on a model call (record, build, the current turn, the
  stubs of outputs the prompt holds);
- ``async_engine``: ``AsyncContextEngine``, the engine's API awaitable from an event loop.

See docs/integrations.md.
"""
