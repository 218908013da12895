"""Pure rules around a build: what a request resolves to from settings and overrides, and
how the refresh ladder counts and stops."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import msgspec

from ctxledger.domain.errors import InvalidInputError, RefreshExhaustedError
from ctxledger.domain.model import COUNT_MAX, AgentIdentity
from ctxledger.domain.request import BuildRequest, Scope
from ctxledger.domain.settings import SECRET_POLICIES, AgentSettings
from ctxledger.domain.strategies import get_strategy

__all__ = [
    "BuildQuery",
    "check_budget",
    "Overrides",
    "latest_step_ids",
    "next_refresh_attempt",
    "refresh_made_progress",
    "resolve_request",
    "validate_settings",
]


class Overrides(msgspec.Struct, frozen=True, kw_only=True):
    """Settings one build overrides for itself only (``None``: use the agent's settings)."""

    budget: int | None = None
    strategy: str | None = None
    scope: Scope | None = None


class BuildQuery(msgspec.Struct, frozen=True, kw_only=True):
    """What a build asks about (retrieval's query); a refresh or rebuild re-asks the last one."""

    task: str = ""
    phase: str = ""
    files: tuple[str, ...] = ()
    symbols: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    failures: tuple[str, ...] = ()
    stage_id: str = ""

    @classmethod
    def of(cls, request: BuildRequest | None) -> BuildQuery:
        if request is None:
            return cls()
        return cls(
            task=request.task,
            phase=request.phase,
            files=request.files,
            symbols=request.symbols,
            keywords=request.keywords,
            failures=request.failures,
            stage_id=request.stage_id,
        )


def validate_settings(settings: AgentSettings) -> AgentSettings:
    """The settings, or InvalidInputError naming what is wrong (unknown strategy, bad budget
    or watermark, unknown secrets policy)."""
    get_strategy(settings.strategy)
    if settings.secrets not in SECRET_POLICIES:
        raise InvalidInputError(
            f"secrets policy must be one of {', '.join(SECRET_POLICIES)}, got {str(settings.secrets)[:40]!r}"
        )
    check_budget(settings.budget)
    if not 0 < settings.watermark <= 0.9:
        raise InvalidInputError("watermark must be in (0, 0.9]")
    return settings


def check_budget(budget: int) -> int:
    """A budget an event can hold (0 … 2**62; 0: fall back to the identity's), or
    InvalidInputError."""
    if not 0 <= budget <= COUNT_MAX:
        raise InvalidInputError(f"budget must be between 0 and {COUNT_MAX} tokens, got {budget}")
    return budget


def resolve_request(
    *,
    identity: AgentIdentity,
    settings: AgentSettings,
    query: BuildQuery,
    overrides: Overrides,
    generation_scope: Scope | None,
    window_cap: int,
    now: datetime,
) -> tuple[BuildRequest, tuple[str, ...]]:
    """The request a build runs with, and the names of the settings it overrode.

    Budget: the override, else the settings' budget, else the identity's; never above the
    window a context-limit refresh learned (``window_cap`` > 0). Strategy: the override, else
    the settings'. Scope: fixed within a generation — ``generation_scope`` is the current
    generation's when it already has a pack (an override that differs is refused), ``None`` at
    a generation boundary, where the override or the settings' scope applies."""
    want = overrides.budget if overrides.budget is not None else settings.budget or identity.budget
    if not want or want <= 0:
        raise InvalidInputError("a build needs a positive token budget")
    budget = min(want, window_cap) if window_cap else want
    strategy = overrides.strategy if overrides.strategy is not None else settings.strategy
    get_strategy(strategy)  # unknown names fail before anything is written
    if generation_scope is not None:
        if overrides.scope is not None and overrides.scope != generation_scope:
            raise InvalidInputError(
                "scope is fixed within a generation; refresh or rebuild to change it"
            )
        scope = generation_scope
    else:
        scope = overrides.scope if overrides.scope is not None else settings.scope
    overridden: list[str] = []
    if overrides.budget is not None and overrides.budget != (settings.budget or identity.budget):
        overridden.append("budget")
    if overrides.strategy is not None and overrides.strategy != settings.strategy:
        overridden.append("strategy")
    if overrides.scope is not None and overrides.scope != settings.scope:
        overridden.append("scope")
    request = BuildRequest(
        agent_id=identity.agent_id,
        budget=budget,
        now=now,
        task=query.task or identity.task,
        role=identity.role,
        phase=query.phase,
        strategy=strategy,
        files=query.files,
        symbols=query.symbols,
        keywords=query.keywords,
        failures=query.failures,
        scope=scope,
        session_id=identity.session_id,
        stage_id=query.stage_id,
        latest_step=settings.latest_step,
    )
    return request, tuple(overridden)


def next_refresh_attempt(agent_id: str, streak: int, max_refreshes: int) -> int:
    """The number of the next refresh since the last successful turn, or
    RefreshExhaustedError once ``max_refreshes`` refreshes made no turn succeed."""
    if streak >= max_refreshes:
        raise RefreshExhaustedError(
            f"agent {agent_id!r}: {streak} refreshes without a successful turn; the pinned "
            "and mandatory context alone may exceed the model's window"
        )
    return streak + 1


def refresh_made_progress(
    *, manual: bool, failed_tokens: int, used: int, stated_window: int = 0
) -> bool:
    """A refresh is done when it was manual, when nothing was known to fail, when the new
    prompt fits the window the provider stated (``stated_window`` > 0: the window learned
    from the error's stated limit), or — with no stated limit — when the new prompt is
    smaller than the one that failed."""
    if manual or failed_tokens == 0:
        return True
    if stated_window:
        return used <= stated_window
    return used < failed_tokens


def latest_step_ids(
    seq: dict[str, int], recorded: int, new_ids: Sequence[str], groups: dict[str, str]
) -> frozenset[str]:
    """The latest step's item ids: those recorded since the last build, the last recording,
    and every item sharing a group with one of them (an action travels with its result).
    ``groups`` maps item id → group ("" for none)."""
    latest = set(new_ids) | {i for i, n in seq.items() if n == recorded}
    wanted = {groups[i] for i in latest if groups.get(i)}
    if wanted:
        latest |= {i for i, g in groups.items() if g in wanted}
    return frozenset(latest)
