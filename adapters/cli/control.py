"""`ctxledger control …`: the inspector's manual controls, each appending events."""

from __future__ import annotations

import enum
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, assert_never

import msgspec
import typer

from ctxledger.adapters.cli.tables import cli_console, visible
from ctxledger.domain.errors import InvalidInputError

if TYPE_CHECKING:  # the engine loads when a command runs, not for `ctxledger --help`
    from ctxledger.adapters.engine.manual_controls import Control

__all__ = ["configure", "control"]

console = cli_console()


class Action(enum.StrEnum):
    pin = "pin"
    unpin = "unpin"
    remove = "remove"
    verify = "verify"
    promote = "promote"
    promote_finding = "promote-finding"
    refresh = "refresh"
    rebuild = "rebuild"


_NEEDS_ITEM = {
    Action.pin,
    Action.unpin,
    Action.remove,
    Action.verify,
    Action.promote,
    Action.promote_finding,
}
BY = "cli"


def _control(action: Action, agent: str, item: str, reason: str, to: str = "") -> Control:
    """The control struct of the command line's arguments."""
    from ctxledger.adapters.engine.manual_controls import (
        Pin,
        Promote,
        PromoteFinding,
        Rebuild,
        Refresh,
        Remove,
        Unpin,
        Verify,
    )

    match action:
        case Action.pin:
            return Pin(agent_id=agent, item_id=item, by=BY)
        case Action.unpin:
            return Unpin(agent_id=agent, item_id=item, by=BY)
        case Action.remove:
            return Remove(agent_id=agent, item_id=item, reason=reason)
        case Action.verify:
            return Verify(agent_id=agent, item_id=item, by=BY)
        case Action.promote:
            return Promote(agent_id=agent, item_id=item)
        case Action.promote_finding:
            return PromoteFinding(agent_id=agent, item_id=item, to=to, by=BY)
        case Action.refresh:
            return Refresh(agent_id=agent, reason=reason)
        case Action.rebuild:
            return Rebuild(agent_id=agent, reason=reason)
        case _:
            assert_never(action)


def control(
    action: Annotated[
        Action,
        typer.Argument(
            help="pin, unpin, remove, verify, promote, promote-finding, refresh or rebuild"
        ),
    ],
    item: Annotated[
        str, typer.Argument(metavar="[ITEM_ID]", help="The item (not for refresh/rebuild).")
    ] = "",
    *,
    store: Annotated[str, typer.Option("--store", envvar="CTXLEDGER_STORE", help="Ledger URL.")],
    agent: Annotated[str, typer.Option("--agent", help="Agent id.")],
    catalog: Annotated[
        Path | None,
        typer.Option("--catalog", envvar="CTXLEDGER_CATALOG", help="Memory catalog (for promote)."),
    ] = None,
    reason: Annotated[
        str, typer.Option("--reason", help="Recorded with remove/refresh/rebuild.")
    ] = "manual",
    to: Annotated[
        str,
        typer.Option(
            "--to", help="promote-finding: the agent whose pool gets it (default: parent)."
        ),
    ] = "",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Apply one manual control to an agent's context (appends events; nothing else changes)."""
    if action in _NEEDS_ITEM and not item:
        raise InvalidInputError(f"{action.value} needs an ITEM_ID")
    if action not in _NEEDS_ITEM and item:
        raise InvalidInputError(f"{action.value} takes no ITEM_ID")
    if action is Action.promote and catalog is None:
        raise InvalidInputError("promote needs --catalog PATH")
    from ctxledger.adapters.bootstrap import open_engine
    from ctxledger.adapters.engine.manual_controls import apply_control
    from ctxledger.adapters.memory.catalog import MemoryCatalog
    from ctxledger.adapters.memory.project import ProjectMemory

    if to and action is not Action.promote_finding:
        raise InvalidInputError("--to is for promote-finding only")
    command = _control(action, agent, item, reason, to)
    cat = MemoryCatalog.open(catalog) if catalog is not None else None
    try:
        engine = open_engine(
            store, must_exist=True, memory=ProjectMemory(cat) if cat is not None else None
        )
        try:
            engine.agent(agent)
            before = engine.ledger.max_position()
            outcome = apply_control(engine, command)
            result: dict[str, Any] = {"action": action.value, "agent": agent}
            if outcome.memory_id is not None:
                result["memory_id"] = outcome.memory_id
            if outcome.item_id is not None:
                result["item_id"] = outcome.item_id
            if outcome.message is not None:
                result["message"] = outcome.message
            result["generation"] = engine.agent(agent).current.number
            result["events"] = engine.ledger.max_position() - before
        finally:
            engine.close()
    finally:
        if cat is not None:
            cat.close()
    if as_json:
        sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    else:
        console.print(visible(" · ".join(f"{k} {v}" for k, v in result.items()), None))


def configure(
    *,
    store: Annotated[str, typer.Option("--store", envvar="CTXLEDGER_STORE", help="Ledger URL.")],
    agent: Annotated[str, typer.Option("--agent", help="Agent id.")],
    strategy: Annotated[str | None, typer.Option("--strategy", help="Strategy name.")] = None,
    budget: Annotated[
        int | None, typer.Option("--budget", help="Token budget (0: the identity's).")
    ] = None,
    watermark: Annotated[
        float | None, typer.Option("--watermark", help="Rebuild target, in (0, 0.9].")
    ] = None,
    recall: Annotated[
        bool | None, typer.Option("--recall/--no-recall", help="Project-memory recall.")
    ] = None,
    latest_step: Annotated[
        bool | None,
        typer.Option("--latest-step/--no-latest-step", help="Keep the newest step's group."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Change an agent's build settings (appends AgentConfigured; every later build, refresh
    and rebuild, from any process, uses them)."""
    from ctxledger.adapters.bootstrap import open_engine

    engine = open_engine(store, must_exist=True)
    try:
        before = engine.ledger.max_position()
        settings = engine.configure(
            agent,
            strategy=strategy,
            budget=budget,
            watermark=watermark,
            recall=recall,
            latest_step=latest_step,
            by=BY,
        )
        events = engine.ledger.max_position() - before
    finally:
        engine.close()
    shown = {k: msgspec.to_builtins(v) for k, v in msgspec.structs.asdict(settings).items()}
    result = {"agent": agent, "settings": shown, "events": events}
    if as_json:
        sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    else:
        console.print(
            f"configure · agent {visible(agent)} · strategy {visible(settings.strategy)} · budget "
            f"{settings.budget or 'identity'} · watermark {settings.watermark} · recall "
            f"{'on' if settings.recall else 'off'} · latest step "
            f"{'kept' if settings.latest_step else 'not forced'} · events {events}"
        )
