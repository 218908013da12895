"""Usage: provider usage of the last model call, and a call that went through without any."""

from __future__ import annotations

from ctxledger.adapters.engine.boundary import checked
from ctxledger.adapters.engine.core import EngineCore, serialized
from ctxledger.adapters.logs import usage_attributes, usage_span
from ctxledger.adapters.usage_types import read_usage
from ctxledger.domain import events as ev
from ctxledger.domain.turn_policy import decide_turn_succeeded

__all__ = ["Usage"]


class Usage(EngineCore):
    """``report_usage`` and ``turn_succeeded``."""

    @serialized
    def report_usage(
        self, agent_id: str, usage: object, *, provider: str | None = None
    ) -> ev.CacheUsageRecorded:
        """Record provider usage (Anthropic, OpenAI or DeepSeek shape) of the last call: the
        SDK's own usage object, read by its type (anthropic, openai chat / Responses, LiteLLM,
        openai-agents, pydantic-ai; see ``ctxledger.adapters.usage_types``), a normalised
        ``Usage``, or a mapping (its shape read from its keys, ``normalize_usage``). The
        booked provider is *provider* (the call's: anthropic, openai or deepseek) when given,
        else the one the SDK type speaks for (a type serving many providers — LiteLLM,
        openai-agents, pydantic-ai — without *provider* is read by its key names). Anything else raises InvalidInputError
        and records nothing. The expected cached tokens scale the prompt's
        tokens by the share of its bytes the previous prompt already held (both recorded on the
        generation's last pack)."""
        ag = self.agent(agent_id)
        session = self._session(agent_id)
        with usage_span(agent_id, conversation_id=session) as span:
            u = read_usage(usage, provider=provider)
            gen = ag.current
            expected = 0
            if gen.builds:
                share = gen.expected_cached_bytes / (gen.prompt_bytes or 1)
                expected = round(u.prompt_tokens * share)
            event = ev.CacheUsageRecorded(
                at=self._now(),
                agent_id=agent_id,
                generation=gen.number,
                provider=u.provider,
                input_tokens=u.input_tokens,
                cache_read_tokens=u.cache_read_tokens,
                cache_write_tokens=u.cache_write_tokens,
                output_tokens=u.output_tokens,
                expected_cached_tokens=expected,
            )
            self._append_agent(agent_id, lambda: [event])
            if span is not None:
                attributes = usage_attributes(event, conversation_id=session, model=ag.agent.model)
                span.set_attributes(attributes)
            return event

    @checked
    @serialized
    def turn_succeeded(self, agent_id: str) -> None:
        """The last model call went through but there is no provider usage to report (e.g. a
        simulated run): ends the turn's refresh count, as ``report_usage`` does."""
        self.agent(agent_id)

        def decide() -> list[ev.Event]:
            ag = self.agent(agent_id)
            return decide_turn_succeeded(
                agent_id,
                refresh_streak=ag.refresh_streak,
                generation=ag.current.number,
                now=self._now,
            )

        self._append_agent(agent_id, decide)
