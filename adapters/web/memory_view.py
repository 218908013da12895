"""The inspector's Memory page: the project-memory catalog's entries (read only, never
creating a catalog) beside the promotions the ledger recorded."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ctxledger.domain.errors import CtxLedgerError
from ctxledger.domain.memory import MEMORY_STATES, MemoryEntry
from ctxledger.projections.catalog import ReadModels
from ctxledger.projections.inspector import InspectorState

__all__ = ["MemoryListing", "list_catalog", "memory_page"]


@dataclasses.dataclass(frozen=True, slots=True)
class MemoryListing:
    """The catalog's entries (read-only), or why there are none to show."""

    status: str
    detail: str = ""
    entries: tuple[MemoryEntry, ...] = ()
    counts: tuple[tuple[str, int], ...] = ()


def list_catalog(path: Path | None) -> MemoryListing:
    """Entries of the project-memory catalog at *path* through its public API, read only.

    Never creates a catalog: a missing file is reported, not made."""
    if path is None:
        return MemoryListing(status="not_configured", detail="start the server with --catalog PATH")
    try:
        from ctxledger.adapters.memory.catalog import MemoryCatalog
    except ImportError:  # pragma: no cover - the module ships with the package
        return MemoryListing(status="unavailable", detail="the memory catalog module is missing")
    if not path.is_file():
        return MemoryListing(status="missing", detail=f"no catalog file at {path}")
    try:
        with MemoryCatalog.open(path, intake=None) as catalog:
            entries = tuple(catalog.list())
    except (CtxLedgerError, OSError) as exc:
        return MemoryListing(status="error", detail=str(exc)[:300])
    except Exception as exc:  # sqlite3.Error and friends: show, never crash the page
        return MemoryListing(status="error", detail=f"{type(exc).__name__}: {str(exc)[:300]}")
    counts = tuple((s, sum(e.state == s for e in entries)) for s in MEMORY_STATES)
    return MemoryListing(status="ok", entries=entries, counts=counts)


def memory_page(states: ReadModels, catalog: Path | None) -> dict[str, Any]:
    """Catalog entries and states, plus the promotions the ledger recorded."""
    inspector: InspectorState = states.inspector
    promotions = [
        (agent_id, c)
        for agent_id, ai in sorted(inspector.by_agent.items())
        for c in ai.controls
        if c.kind == "promote"
    ]
    return {"listing": list_catalog(catalog), "promotions": promotions}
