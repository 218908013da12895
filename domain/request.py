"""What an orchestrator asks for: a BuildRequest with its Scope."""

from __future__ import annotations

from datetime import datetime

import msgspec

from ctxledger.domain.model import Layer, Source

__all__ = ["BuildRequest", "Scope"]


class Scope(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Limits of one build; fixed within a generation, takes effect at build/refresh boundaries.

    Empty ``layers``/``sources`` mean "all". ``dependency_task_ids`` set (even to ``()``)
    restricts parent reports to those task ids. ``clip_above_tokens`` > 0 clips every
    non-mandatory, non-pinned item larger than that to a head/tail excerpt.
    """

    layers: tuple[Layer, ...] = ()
    sources: tuple[Source, ...] = ()
    exclude_project_memory: bool = False
    dependency_task_ids: tuple[str, ...] | None = None
    clip_above_tokens: int = 0


class BuildRequest(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Ask for the next pack of one agent under a token budget.

    ``latest_step`` (the agent's latest-step policy) keeps the newest step's group and the
    last failures in every build, clipped to fit; the planner turns it into ``keep_ids``
    (those items, most important first), which packing includes right after pinned and
    mandatory content — whole when they fit, else compressed or head/tail-clipped to the room
    left, never over the budget. ``purpose`` ``"decision_point"`` asks for seed 004's
    DecisionPointBuilder view: a small pack of L0 + L1 only, built on its own (it never
    changes the generation's prompt); ``""`` is an ordinary prompt."""

    agent_id: str
    budget: int
    now: datetime
    task: str = ""
    role: str = ""
    phase: str = ""
    strategy: str = "variable"
    files: tuple[str, ...] = ()
    symbols: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    failures: tuple[str, ...] = ()
    scope: Scope = Scope()
    session_id: str = ""
    stage_id: str = ""
    latest_step: bool = False
    keep_ids: tuple[str, ...] = ()
    purpose: str = ""
    recent: tuple[str, ...] = ()
    """Groups of the newest steps, newest first, that packing takes right after the kept
    units and before the priority tiers (the planner fills it for a generation's first pack
    under the latest-step policy: the steps the agent is working from come before older
    material of any tier)."""
