"""``ctxledger doctor``: every damaged row of a ledger in one pass, and ``--quarantine``."""

from __future__ import annotations

import dataclasses
import json
import sys
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.table import Table

from ctxledger.adapters.cli.options import JsonOpt, StoreOpt
from ctxledger.adapters.cli.tables import cli_console, show, shown, visible
from ctxledger.adapters.ledger import QUARANTINE_TABLE, accept_emptied, open_ledger
from ctxledger.adapters.ledger.doctor import DoctorReport, examine, loss_of, quarantine
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


AcceptLossOpt = Annotated[
    bool,
    typer.Option(
        "--accept-loss",
        help="Record the loss found (in the head file, with what was lost and when) so that "
        "writers may go on; persisted read models past the end are rebuilt from the log.",
    ),
]


class DamageFoundError(CtxLedgerError):
    """The doctor found damaged rows (listed above the error line)."""


class LossFoundError(CtxLedgerError):
    """The log ends before the position its store recorded holding."""


def doctor(
    store: StoreOpt,
    move: QuarantineOpt = False,
    accept_loss: AcceptLossOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """List every stored row that does not decode (position, stream, version, kind, reason)
    in one pass, and any loss; exit 1 if there is any. With --quarantine, move damaged rows
    aside; with --accept-loss, record the loss so that writers may go on."""
    now = datetime.now(UTC).isoformat(timespec="seconds")
    accepted = accept_emptied(store, at=now) if accept_loss else ""
    if accepted:  # nothing left to examine: the file is missing or empty
        console.print(f"accepted the loss: {visible(accepted)}")
        return
    writes = move or accept_loss
    with open_ledger(
        store, must_exist=True, loss_check=not accept_loss, read_only=not writes
    ) as ledger:
        report = examine(ledger)
        moved = quarantine(ledger, report.damaged) if move and report.damaged else 0
        quarantined = len(ledger.quarantined()) if moved else report.quarantined
        if moved:  # rows left on purpose: the loss is what is missing besides them
            lost_now = loss_of(ledger)
            report = dataclasses.replace(report, loss=lost_now.line if lost_now else "")
        if accept_loss and (lost := loss_of(ledger)) is not None:
            ledger.accept_loss(lost, at=now)
            accepted = lost.line
    if as_json:
        _print_json(report, moved, quarantined, accepted)
    else:
        _print_table(report, moved, quarantined)
        if accepted:
            console.print(f"accepted the loss: {visible(accepted)}")
    if report.loss and not accepted:
        raise LossFoundError(report.loss)
    if report.damaged and not moved:
        first = report.damaged[0]
        raise DamageFoundError(
            f"{len(report.damaged)} damaged rows of {report.rows}; first at position "
            f"{first.position}: {first.kind}: {first.reason} (--quarantine moves them aside)"
        )


def _print_json(report: DoctorReport, moved: int, quarantined: int, accepted: str) -> None:
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
        "accepted_loss": accepted,
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
