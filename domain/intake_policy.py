"""Intake decisions: registering an agent and changing its settings (pure: state in, events
out; ``now`` is read only once a decision appends something)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import msgspec

from ctxledger.domain import events as ev
from ctxledger.domain.build_policy import validate_settings
from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.model import AgentIdentity
from ctxledger.domain.settings import AgentSettings

__all__ = ["decide_configure", "decide_register"]


def decide_register(
    existing: AgentIdentity | None,
    identity: AgentIdentity,
    settings: AgentSettings,
    *,
    now: Callable[[], datetime],
) -> list[ev.Event]:
    """Register *identity* with *settings* once; the same identity again decides nothing, a
    different identity under a registered agent id is refused."""
    if existing is not None:
        if existing != identity:
            raise InvalidInputError(
                f"agent {identity.agent_id!r} is already registered with another identity"
            )
        return []
    at = now()
    return [
        ev.AgentRegistered(at=at, agent=identity),
        ev.AgentConfigured(at=at, agent_id=identity.agent_id, settings=settings),
    ]


def decide_configure(
    agent_id: str,
    current: AgentSettings,
    changes: Mapping[str, Any],
    *,
    now: Callable[[], datetime],
    by: str = "",
) -> list[ev.Event]:
    """The ``AgentConfigured`` of *changes* applied to *current* (validated); none if they
    change nothing."""
    new = validate_settings(msgspec.structs.replace(current, **changes))
    if new == current:
        return []
    return [ev.AgentConfigured(at=now(), agent_id=agent_id, settings=new, by=by)]
