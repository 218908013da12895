"""`ctxledger erase`: forget recorded text by destroying its content keys (crypto-shredding)."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from ctxledger.adapters.cli.tables import cli_console, visible

__all__ = ["erase"]

console = cli_console()


def erase(
    *,
    store: Annotated[str, typer.Option("--store", envvar="CTXLEDGER_STORE", help="Ledger URL.")],
    agent: Annotated[str, typer.Option("--agent", help="Agent id.")],
    reason: Annotated[
        str, typer.Option("--reason", help="Why (recorded; shown in place of the text).")
    ],
    item: Annotated[
        str,
        typer.Option(
            "--item", help="One item's text only (default: everything the agent recorded)."
        ),
    ] = "",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Erase an agent's recorded text (or one item's) from an encrypted ledger: its keys are
    destroyed, the events stay and read "\\[erased: reason, at]"; read models are rebuilt."""
    from ctxledger.adapters.bootstrap import open_engine

    engine = open_engine(store, must_exist=True)
    try:
        event = engine.erase(agent, item, reason=reason)
        result = {
            "agent": agent,
            "item": item or None,
            "reason": reason,
            "at": event.at.isoformat(timespec="seconds"),
            "items": list(event.items),
            "position": engine.ledger.max_position(),
        }
    finally:
        engine.close()
    if as_json:
        sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    else:
        what = f"item {item}" if item else f"{len(event.items)} items of agent {agent}"
        console.print(
            f"erased {visible(what)} · reason {visible(reason)} · keys destroyed, "
            "read models rebuilt"
        )
