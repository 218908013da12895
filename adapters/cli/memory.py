"""`ctxledger memory …`: list, show, verify, retire, delete and import-legacy on a catalog; the
ledger-wide recall switch (`memory recall`)."""

from __future__ import annotations

import enum
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import msgspec
import typer
from rich.table import Table
from rich.text import Text

from ctxledger.adapters.cli.options import JsonOpt
from ctxledger.adapters.cli.tables import cli_console, shown, visible
from ctxledger.adapters.cli.tables import show as show_table
from ctxledger.adapters.ledger.store_files import check_catalog_file
from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.memory import MEMORY_STATES

if TYPE_CHECKING:  # the catalog (pydantic schemas, detect-secrets) loads when a command runs
    from ctxledger.adapters.engine import ContextEngine
    from ctxledger.adapters.memory.catalog import MemoryCatalog
    from ctxledger.domain.memory import MemoryEntry

__all__ = ["memory_app"]

memory_app = typer.Typer(no_args_is_help=True, help="Project memory catalog (guarded, erasable).")
console = cli_console()

CatalogOpt = Annotated[
    Path,
    typer.Option("--catalog", envvar="CTXLEDGER_CATALOG", help="Path of the catalog SQLite file."),
]
StoreOpt = Annotated[
    str,
    typer.Option(
        "--store",
        envvar="CTXLEDGER_STORE",
        help="Also record the change as an event in this ledger.",
    ),
]
IdArg = Annotated[str, typer.Argument(metavar="MEMORY_ID")]


def _json(obj: Any) -> None:
    sys.stdout.write(json.dumps(msgspec.to_builtins(obj), sort_keys=True) + "\n")


def _open(catalog: Path, *, create: bool = False) -> MemoryCatalog:
    """The catalog at *catalog*; unless *create*, it must exist and be a memory catalog (checked
    read-only first, so a wrong file is never written)."""
    if not create and not catalog.is_file():
        raise InvalidInputError(f"{catalog}: no such catalog file")
    check_catalog_file(catalog, must_be_catalog=not create)
    from ctxledger.adapters.memory.catalog import MemoryCatalog

    return MemoryCatalog.open(catalog)


@contextmanager
def _engine(store: str, catalog: MemoryCatalog) -> Iterator[ContextEngine]:
    from ctxledger.adapters.bootstrap import open_engine
    from ctxledger.adapters.memory.project import ProjectMemory

    engine = open_engine(store, memory=ProjectMemory(catalog))
    try:
        yield engine
    finally:
        engine.close()


def _summary(e: MemoryEntry) -> dict[str, Any]:
    return {
        "id": e.id,
        "state": e.state,
        "verified": e.verified,
        "revision": e.revision,
        "partition": e.partition,
        "source": e.source,
        "agent": e.agent,
        "observed_at": e.observed_at.isoformat(),
        "evidence_files": [f.path for f in e.evidence.files],
    }


@memory_app.command("list")
def list_entries(
    catalog: CatalogOpt,
    state: Annotated[str, typer.Option("--state", help="Only this state.")] = "",
    as_json: JsonOpt = False,
) -> None:
    """Every entry with its state (bodies are shown by `show` only)."""
    if state and state not in MEMORY_STATES:
        raise InvalidInputError(f"unknown state {state!r}; use one of {', '.join(MEMORY_STATES)}")
    from ctxledger.adapters.memory.catalog import MemoryCatalog

    with MemoryCatalog.open_read_only(catalog) as cat:  # a reader never writes
        entries = cat.list(states=(state,) if state else None)
    if as_json:
        _json({"entries": [_summary(e) for e in entries]})
        return
    t = Table(title=f"memory · {catalog}")
    for col in ("id", "state", "rev", "source", "agent", "observed", "evidence"):
        t.add_column(col, overflow="fold")
    for e in entries:
        t.add_row(
            shown(e.id),
            e.state,
            str(e.revision),
            shown(e.source),
            shown(e.agent),
            e.observed_at.date().isoformat(),
            shown(", ".join(f.path for f in e.evidence.files[:3])),
        )
    show_table(console, t)


@memory_app.command()
def show(catalog: CatalogOpt, memory_id: IdArg, as_json: JsonOpt = False) -> None:
    """One entry, body included."""
    from ctxledger.adapters.memory.catalog import MemoryCatalog

    with MemoryCatalog.open_read_only(catalog) as cat:
        entry = cat.get(memory_id)
    if as_json:
        _json({**_summary(entry), "body": entry.body})
        return
    for k, v in _summary(entry).items():
        console.print(Text.assemble((k, "bold"), f": {visible(str(v))}"))
    for line in entry.body.split("\n"):  # whole, line by line; control characters visible
        console.print(visible(line, None))


def _change(catalog: Path, store: str, memory_id: str, action: str, as_json: JsonOpt) -> None:
    with _open(catalog) as cat:
        if store:
            with _engine(store, cat) as engine:
                if action == "verify":
                    engine.verify_memory(memory_id, by="cli")
                elif action == "retire":
                    engine.retire_memory(memory_id, reason="cli")
                else:
                    engine.delete_memory(memory_id)
        else:
            entry = cat.get(memory_id)
            if action == "verify":
                cat.verify(memory_id, entry.revision)
            elif action == "retire":
                cat.retire(memory_id, entry.revision)
            else:
                cat.delete(memory_id, entry.revision)
        after = cat.get(memory_id)
        report = cat.last_erasure if action == "delete" else None
    result: dict[str, Any] = {"id": memory_id, "state": after.state, "revision": after.revision}
    if report is not None:
        result["erasure"] = msgspec.to_builtins(report)
    if as_json:
        _json(result)
    else:
        console.print(f"{visible(memory_id)}: {after.state} (revision {after.revision})")
        if report is not None and report.checkpoint_blocked:
            console.print("warning: a reader blocked the WAL checkpoint; run again when idle")


@memory_app.command()
def verify(
    catalog: CatalogOpt, memory_id: IdArg, store: StoreOpt = "", as_json: JsonOpt = False
) -> None:
    """Explicitly verify an entry (the only way an entry becomes verified)."""
    _change(catalog, store, memory_id, "verify", as_json)


@memory_app.command()
def retire(
    catalog: CatalogOpt, memory_id: IdArg, store: StoreOpt = "", as_json: JsonOpt = False
) -> None:
    """Retire an entry: it is no longer recalled."""
    _change(catalog, store, memory_id, "retire", as_json)


@memory_app.command()
def delete(
    catalog: CatalogOpt, memory_id: IdArg, store: StoreOpt = "", as_json: JsonOpt = False
) -> None:
    """Erase an entry's body under the erasure policy (see docs/memory.md)."""
    _change(catalog, store, memory_id, "delete", as_json)


@memory_app.command("import-legacy")
def import_legacy(
    catalog: CatalogOpt,
    legacy: Annotated[Path, typer.Argument(metavar="LEGACY_DB", help="An older catalog file.")],
    as_json: JsonOpt = False,
) -> None:
    """Import an older catalog's memory rows through the intake, in one transaction."""
    if not legacy.is_file():
        raise InvalidInputError(f"{legacy}: no such file")
    with _open(catalog, create=True) as cat:
        report = cat.import_legacy(legacy)
    if as_json:
        _json(report)
    else:
        console.print(f"imported {report.imported}, dropped {report.dropped}")
        for reason, n in sorted(report.reasons.items()):
            console.print(f"  {visible(reason)}: {n}")


class RecallState(enum.StrEnum):
    on = "on"
    off = "off"


@memory_app.command("recall")
def recall_switch(
    state: Annotated[
        RecallState | None, typer.Argument(help="on or off (none: show the recorded setting).")
    ] = None,
    *,
    store: Annotated[str, typer.Option("--store", envvar="CTXLEDGER_STORE", help="Ledger URL.")],
    as_json: JsonOpt = False,
) -> None:
    """Turn project-memory recall on or off for the whole ledger (appends RecallSwitched: every
    process that opens it builds with it), or show the recorded setting."""
    from ctxledger.adapters.bootstrap import open_engine

    engine = open_engine(store, must_exist=True)
    try:
        before = engine.ledger.max_position()
        if state is not None:
            engine.set_recall(state is RecallState.on, by="cli")
        recorded = engine.runner.inspector.recall_enabled
        events = engine.ledger.max_position() - before
    finally:
        engine.close()
    shown_state = "not recorded" if recorded is None else ("on" if recorded else "off")
    if as_json:
        _json({"recall": shown_state, "events": events})
    else:
        console.print(f"recall: {shown_state} ({events} event{'s' if events != 1 else ''})")
