"""ctxledger's public face: everything the quickstart and an orchestrator use, from one
import line::

    from ctxledger.adapters import AgentIdentity, Layer, Source, open_engine

Names load on first use (``import ctxledger.adapters`` alone costs nothing: the CLI's
``--help`` does not pay for the engine's imports). ``open_engine`` is the one way to open an
engine (the composition root, ``adapters/bootstrap.py``); the CLI, the web inspector, the
tests and the benchmarks open through it too. Anything not listed in ``__all__`` is internal.
"""

from __future__ import annotations

import functools
import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctxledger.adapters.bootstrap import open_engine
    from ctxledger.adapters.engine import (
        BuildResult,
        ContextEngine,
        EngineSettings,
        TurnErrorOutcome,
    )
    from ctxledger.adapters.integrations.async_engine import AsyncContextEngine
    from ctxledger.adapters.ledger import Ledger, LossError, open_ledger
    from ctxledger.adapters.memory.catalog import MemoryCatalog
    from ctxledger.adapters.memory.project import ProjectMemory
    from ctxledger.domain.errors import (
        ConflictError,
        CtxLedgerError,
        InvalidInputError,
        LedgerUnavailableError,
        MemoryIntakeError,
        RefreshExhaustedError,
        SecretRefusedError,
        UnknownAgentError,
    )
    from ctxledger.domain.model import AgentIdentity, Durability, Item, Layer, Source
    from ctxledger.domain.settings import AgentSettings, InputLimits

    __version__: str
    """The installed distribution's version (``ctxledger --version`` prints it)."""

__all__ = [
    "AgentIdentity",
    "AgentSettings",
    "AsyncContextEngine",
    "BuildResult",
    "ConflictError",
    "ContextEngine",
    "CtxLedgerError",
    "Durability",
    "EngineSettings",
    "InputLimits",
    "InvalidInputError",
    "Item",
    "Layer",
    "Ledger",
    "LedgerUnavailableError",
    "LossError",
    "MemoryCatalog",
    "MemoryIntakeError",
    "ProjectMemory",
    "RefreshExhaustedError",
    "SecretRefusedError",
    "Source",
    "TurnErrorOutcome",
    "UnknownAgentError",
    "__version__",
    "open_engine",
    "open_ledger",
]

_HOME = {
    "open_engine": "ctxledger.adapters.bootstrap",
    "BuildResult": "ctxledger.adapters.engine",
    "ContextEngine": "ctxledger.adapters.engine",
    "EngineSettings": "ctxledger.adapters.engine",
    "TurnErrorOutcome": "ctxledger.adapters.engine",
    "AsyncContextEngine": "ctxledger.adapters.integrations.async_engine",
    "Ledger": "ctxledger.adapters.ledger",
    "LossError": "ctxledger.adapters.ledger",
    "open_ledger": "ctxledger.adapters.ledger",
    "MemoryCatalog": "ctxledger.adapters.memory.catalog",
    "ProjectMemory": "ctxledger.adapters.memory.project",
    "ConflictError": "ctxledger.domain.errors",
    "CtxLedgerError": "ctxledger.domain.errors",
    "InvalidInputError": "ctxledger.domain.errors",
    "LedgerUnavailableError": "ctxledger.domain.errors",
    "MemoryIntakeError": "ctxledger.domain.errors",
    "RefreshExhaustedError": "ctxledger.domain.errors",
    "SecretRefusedError": "ctxledger.domain.errors",
    "UnknownAgentError": "ctxledger.domain.errors",
    "AgentIdentity": "ctxledger.domain.model",
    "Durability": "ctxledger.domain.model",
    "Item": "ctxledger.domain.model",
    "Layer": "ctxledger.domain.model",
    "Source": "ctxledger.domain.model",
    "AgentSettings": "ctxledger.domain.settings",
    "InputLimits": "ctxledger.domain.settings",
}


@functools.cache
def _installed_version() -> str:
    # importlib.metadata costs ~35 ms (email parsing); only `--version` and callers pay it
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ctxledger")
    except PackageNotFoundError:  # running from a checkout that was never installed
        return "0+unknown"


def __getattr__(name: str) -> object:
    if name == "__version__":
        return _installed_version()
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
