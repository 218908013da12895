"""The composition root: the one place that builds an engine from a store URL. The CLI, the
web app, ``simulate``, the demo and the tests open engines through :func:`open_engine`;
nothing else wires adapters together, and no constructor does I/O."""

from __future__ import annotations

from ctxledger.adapters.engine import ContextEngine, EngineSettings
from ctxledger.adapters.ledger import FROM_ENV, Ledger, open_ledger
from ctxledger.adapters.ledger.projection_runner import ProjectionRunner
from ctxledger.adapters.memory.intake import MemoryIntake
from ctxledger.adapters.memory.project import ProjectMemory
from ctxledger.adapters.tokens import default_counter
from ctxledger.domain.ports import Clock, TokenCounter

__all__ = ["open_engine"]


def open_engine(
    store: str | Ledger,
    *,
    memory: ProjectMemory | None = None,
    counter: TokenCounter | None = None,
    clock: Clock | None = None,
    settings: EngineSettings | None = None,
    must_exist: bool = False,
    master_key: bytes | None = FROM_ENV,
    encrypt: bool | None = None,
    allow_foreign: bool = False,
) -> ContextEngine:
    """An engine over *store* (a ledger URL, or a ledger already open) with its read models
    loaded and caught up with the log. ``must_exist``: refuse a store that does not exist yet
    (readers and controls must never create one). ``master_key`` and ``encrypt``: content
    encryption, as ``open_ledger`` says (by default the master key configured in the
    environment, and a new ledger encrypts when there is one). ``allow_foreign``: write
    ctxledger's tables into another application's SQLite database (refused by default)."""
    ledger = (
        open_ledger(
            store,
            must_exist=must_exist,
            master_key=master_key,
            encrypt=encrypt,
            allow_foreign=allow_foreign,
        )
        if isinstance(store, str)
        else store
    )
    try:
        runner = ProjectionRunner(ledger)
        runner.run_once()
    except BaseException:
        if isinstance(store, str):
            ledger.close()
        raise
    # One scanner for the ledger's redaction and the catalog's intake (one policy).
    intake = memory.catalog.intake if memory is not None else None
    scanner = intake.scanner if isinstance(intake, MemoryIntake) else None
    return ContextEngine(
        ledger,
        counter=counter or default_counter(),
        clock=clock,
        settings=settings,
        memory=memory,
        runner=runner,
        scanner=scanner,
    )
