"""Turn errors and refreshes: record a failed model call, refresh on a context-limit error (a
new generation, smaller than before, until it makes progress or is exhausted), and rebuild."""

from __future__ import annotations

import logging
from typing import Literal

import msgspec

from ctxledger.adapters.engine.boundary import checked
from ctxledger.adapters.engine.build import BuildProtocol
from ctxledger.adapters.engine.core import BuildResult, log, serialized
from ctxledger.domain import events as ev
from ctxledger.domain.build_policy import next_refresh_attempt, refresh_made_progress
from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.input_checks import check_text
from ctxledger.domain.turn_errors import TurnError, classify_turn_error
from ctxledger.projections.build_view import refresh_generation

__all__ = ["Refresh", "TurnErrorOutcome"]


class TurnErrorOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What ``on_turn_error`` did: refreshed (with the retry's pack) or recorded only."""

    error: TurnError
    refreshed: bool
    message: str = ""
    result: BuildResult | None = None


class Refresh(BuildProtocol):
    """``on_turn_error``, ``refresh`` and ``rebuild``: new generations built by the protocol."""

    @checked
    @serialized
    def on_turn_error(
        self, agent_id: str, error: object, *, provider: str = ""
    ) -> TurnErrorOutcome:
        """Record a failed model call; refresh only on a context-limit error.

        Returns the refreshed generation's pack for the retry. Repeated refreshes that make
        no progress end in RefreshExhaustedError (never a loop).
        """
        ag = self.agent(agent_id)
        verdict = classify_turn_error(error, provider=provider)
        for field in ("message", "code", "provider"):
            check_text(
                getattr(verdict, field), f"on_turn_error: {field}", self.input_limits.text_bytes
            )
        failed = ev.TurnFailed(
            at=self._now(),
            agent_id=agent_id,
            generation=ag.current.number,
            error_class=verdict.error_class,
            provider=verdict.provider,
            code=verdict.code,
            message=verdict.message,
        )
        self._append_agent(agent_id, lambda: [failed])
        log.log(
            logging.INFO if verdict.error_class == "context_limit" else logging.WARNING,
            "turn error (%s%s): %s",
            verdict.error_class,
            f" from {verdict.provider}" if verdict.provider else "",
            " ".join(verdict.message.split())[:300],
            extra={
                "agent_id": agent_id,
                "generation": failed.generation,
                "error_class": verdict.error_class,
                "provider": verdict.provider or None,
            },
        )
        if verdict.error_class != "context_limit":
            return TurnErrorOutcome(error=verdict, refreshed=False)
        reason = f"context-limit error{' from ' + verdict.provider if verdict.provider else ''}"
        result = self.refresh(agent_id, reason=reason, trigger="context_limit", error=verdict)
        return TurnErrorOutcome(
            error=verdict, refreshed=True, message=result.message, result=result
        )

    @checked
    @serialized
    def refresh(
        self,
        agent_id: str,
        *,
        reason: str = "manual",
        trigger: Literal["context_limit", "manual"] = "manual",
        error: TurnError | None = None,
    ) -> BuildResult:
        """The refresh pipeline: keep durable state, drop ephemeral and raw history, start a
        new generation (same agent identity) and build its first pack, smaller than before.
        The count of refreshes since the last successful turn is folded from the log."""
        failed_tokens = self.agent(agent_id).current.tokens_used
        start = self.agent(agent_id).current.number
        while True:
            attempt = next_refresh_attempt(
                agent_id, self.agent(agent_id).refresh_streak, self.settings.max_refreshes
            )
            why = reason
            if attempt > 1:
                why = f"{reason} (attempt {attempt}: still ≥ {failed_tokens} tokens)"
            self._refresh_generation(
                agent_id,
                reason=why,
                trigger=trigger,
                attempt=attempt,
                failed_tokens=failed_tokens,
                error=error,
            )
            request, _ = self._request(agent_id, boundary=True)
            result = self._build(agent_id, request)
            stated = error is not None and error.limit_tokens > 0
            if refresh_made_progress(
                manual=trigger == "manual",
                failed_tokens=failed_tokens,
                used=result.pack.budget_used,
                stated_window=self.agent(agent_id).window if stated else 0,
            ):
                steps = result.generation - start
                message = f"Context refreshed · Generation {start} → {result.generation} · Reason: {reason}"
                if steps > 1:
                    message += f" ({steps} refreshes to get below {failed_tokens} tokens)"
                log.info(
                    "%s",
                    message,
                    extra={
                        "agent_id": agent_id,
                        "generation": result.generation,
                        "pack_id": result.pack.id,
                        "kind": trigger,
                    },
                )
                return msgspec.structs.replace(result, message=message)

    def _refresh_generation(
        self,
        agent_id: str,
        *,
        reason: str,
        trigger: Literal["context_limit", "manual"],
        attempt: int,
        failed_tokens: int,
        error: TurnError | None,
    ) -> None:
        """Append the GenerationRefreshed of one refresh: the cut and the new budget cap."""

        def decide() -> list[ev.Event]:
            request, _ = self._request(agent_id, boundary=True)
            return [
                refresh_generation(
                    self.agent(agent_id).current,
                    self.pool(agent_id),
                    request,
                    at=self._now(),
                    reason=reason,
                    trigger=trigger,
                    attempt=attempt,
                    failed_tokens=failed_tokens,
                    error=error,
                )
            ]

        self._append_agent(agent_id, decide)

    @checked
    @serialized
    def rebuild(self, agent_id: str, *, reason: str = "manual") -> BuildResult:
        """Manual control: re-pack into a new generation below the watermark."""
        if not self.agent(agent_id).current.builds:
            raise InvalidInputError("nothing to rebuild: the generation has no pack yet")
        request, _ = self._request(agent_id, boundary=True)
        return self._build(agent_id, request, force_rebuild=f"manual: {reason}")
