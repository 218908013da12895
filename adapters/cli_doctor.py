"""``ctxledger doctor``: every damaged row of a ledger in one pass, and ``--quarantine``."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from rich.table import Table

from ctxledger.adapters.cli_options import JsonOpt, StoreOpt
from ctxledger.adapters.cli_tables import cli_console, show, shown
from ctxledger.adapters.doctor import DoctorReport, examine, quarantine
from ctxledger.adapters.ledger import QUARANTINE_TABLE, open_ledger
from ctxledger.domain.errors import CtxLedgerError

__all__ = ["DamageFoundError", "doctor"]

console = cli_console()

QuarantineOpt = Annotated[
    bool,
    typer.Option(
        "--quarantine",
        help=f"Move the damaged rows into {QUARANTINE_TABLE} (same database, kept whole with "
        "the reason), in one transaction, so that the rest of the log replays.",
    ),
]


class DamageFoundError(CtxLedgerError):
    """The doctor found damaged rows (listed above the error line)."""


class LossFoundError(CtxLedgerError):
    """The log ends before the position its store recorded holding."""


def doctor(store: StoreOpt, move: QuarantineOpt = False, as_json: JsonOpt = False) -> None:
    """List every stored row that does not decode (position, stream, version, kind, reason)
    in one pass; exit 1 if there is any. With --quarantine, move them aside."""
    with open_ledger(store, must_exist=True, read_only=not move) as ledger:
        report = examine(ledger)
        moved = quarantine(ledger, report.damaged) if move and report.damaged else 0
        quarantined = len(ledger.quarantined()) if moved else report.quarantined
    if as_json:
        _print_json(report, moved, quarantined)
    else:
        _print_table(report, moved, quarantined)
    if report.loss:
        raise LossFoundError(report.loss)
    if report.damaged and not moved:
        first = report.damaged[0]
        raise DamageFoundError(
            f"{len(report.damaged)} damaged rows of {report.rows}; first at position "
            f"{first.position}: {first.kind}: {first.reason} (--quarantine moves them aside)"
        )


def _print_json(report: DoctorReport, moved: int, quarantined: int) -> None:
    obj: dict[str, Any] = {
        "rows": report.rows,
        "damaged": [
            {
                "position": d.position,
                "stream_id": d.stream_id,
                "version": d.version,
                "topic": d.topic,
                "kind": d.kind,
                "reason": d.reason,
            }
            for d in report.damaged
        ],
        "clean": not report.damaged and not report.loss,
        "loss": report.loss,
        "quarantined_now": moved,
        "quarantined": quarantined,
    }
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")


def _print_table(report: DoctorReport, moved: int, quarantined: int) -> None:
    if not report.damaged:
        line = f"doctor: {report.rows} rows, no damage"
        if quarantined:
            line += f" · {quarantined} rows in {QUARANTINE_TABLE} (their streams refuse appends)"
        console.print(line)
        return
    t = Table(title=f"doctor · {len(report.damaged)} damaged rows of {report.rows}")
    for col in ("position", "stream", "version", "kind", "reason"):
        t.add_column(col, overflow="fold")
    for d in report.damaged:
        t.add_row(str(d.position), shown(d.stream_id), str(d.version), d.kind, shown(d.reason))
    show(console, t)
    if moved:
        console.print(
            f"quarantined {moved} rows into {QUARANTINE_TABLE}; "
            f"{len({d.stream_id for d in report.damaged})} streams refuse appends until repaired"
        )
