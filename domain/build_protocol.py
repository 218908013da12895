"""The two-commit build's own decisions: its Started (closing an abandoned build first) and the
end of a build that produced no pack. Planning the outcome is ``build_record.record_build``."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from ctxledger.domain import events as ev
from ctxledger.domain.build_record import build_started
from ctxledger.domain.request import BuildRequest

__all__ = ["ABANDONED", "SUPERSEDED", "decide_close", "decide_start"]

ABANDONED = "process ended before the build finished"
SUPERSEDED = "superseded: the agent's stream moved during the build"


def decide_start(
    request: BuildRequest,
    *,
    version: int,
    abandoned: str,
    generation: int,
    watermark: float,
    counter: str,
    force_rebuild: str,
    overrides: tuple[str, ...],
) -> list[ev.Event]:
    """At stream *version*: an Interrupted for the *abandoned* build in flight (``""``: none),
    then the Started, whose pack id names the version it lands at."""
    agent_id = request.agent_id
    events: list[ev.Event] = []
    if abandoned:
        events.append(
            ev.ContextBuildingInterrupted(
                at=request.now, agent_id=agent_id, pack_id=abandoned, reason=ABANDONED
            )
        )
    at_version = version + len(events) + 1
    events.append(
        build_started(
            request,
            pack_id=f"{agent_id}/g{generation}/v{at_version}",
            generation=generation,
            watermark=watermark,
            counter=counter,
            force_rebuild=force_rebuild,
            overrides=overrides,
        )
    )
    return events


def decide_close(
    started: ev.ContextBuildingStarted,
    building: str,
    *,
    interrupted: bool,
    reason: str,
    now: Callable[[], datetime],
) -> list[ev.Event]:
    """End *started* without a pack (Interrupted or Failed), unless the build in flight
    (*building*) is no longer it: someone else closed it already."""
    if building != started.pack_id:
        return []
    kind = ev.ContextBuildingInterrupted if interrupted else ev.ContextBuildingFailed
    return [kind(at=now(), agent_id=started.agent_id, pack_id=started.pack_id, reason=reason)]
