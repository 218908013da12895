"""ctxledger's public face: everything the quickstart and an orchestrator use, from one
import line::

    from ctxledger.adapters import AgentIdentity, Layer, Source, open_engine

Names load on first use (``import ctxledger.adapters`` alone loads nothing of the engine,
only stdlib ``logging`` for the library's ``NullHandler``: the CLI's ``--help`` does not pay
for the engine's imports). ``open_engine`` is the one way to open an
engine (the composition root, ``adapters/bootstrap.py``); the CLI, the web inspector, the
tests and the benchmarks open through it too. Anything not listed in ``__all__`` is internal.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import sys
import warnings
from types import ModuleType
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


MOVED: dict[str, str] = {
    "cli_control": "cli.control",
    "cli_doctor": "cli.doctor",
    "cli_erase": "cli.erase",
    "cli_inspect": "cli.inspect",
    "cli_memory": "cli.memory",
    "cli_options": "cli.options",
    "cli_serve": "cli.serve",
    "cli_simulate": "cli.simulate",
    "cli_tables": "cli.tables",
    "demo": "cli.demo",
    "boundary": "engine.boundary",
    "controls": "engine.manual_controls",
    "rederive": "engine.rederive",
    "doctor": "ledger.doctor",
    "projection_runner": "ledger.projection_runner",
    "published_heads": "ledger.published_heads",
    "store_files": "ledger.store_files",
    "stream_locks": "ledger.locks",
    "catalog_store": "memory.store",
    "freshness": "memory.freshness",
    "memory_catalog": "memory.catalog",
    "memory_guard": "memory.guard",
    "memory_intake": "memory.intake",
    "memory_schema": "memory.schema",
    "project_memory": "memory.project",
    "content_seal": "security.content_seal",
    "key_table": "security.key_table",
    "secret_scan": "security.secret_scan",
    "secret_views": "security.secret_views",
    "prompt_quality": "simulation.prompt_quality",
    "simulate": "simulation.simulate",
}
"""Modules of the flat 0.x tree (``ctxledger.adapters.<old>``) and where each lives now.
Importing an old path still works — it is the new module itself, not a copy — with a
DeprecationWarning naming the new path; the project's own code uses only the new paths."""


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves the old module paths of ``MOVED`` to the modules they became. Consulted
    only after the regular finders found nothing (it is appended to ``sys.meta_path``)."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        old = fullname.removeprefix(__name__ + ".")
        if old == fullname or old not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = f"{__name__}.{MOVED[spec.name.removeprefix(__name__ + '.')]}"
        warnings.warn(
            f"{spec.name} moved to {new}; import it from there",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module was imported under its new name."""


if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
    sys.meta_path.append(_MovedModules())

# Every ctxledger logger (``ctxledger.engine``, ``ctxledger.render``, …) lives under this
# package, so this runs before any of them logs. A library's own NullHandler, as the logging
# HOWTO advises: with no handler anywhere, Python's last-resort handler would print the
# library's warnings to stderr of an application that never configured logging. Records
# still propagate to the application's handlers.
_library_logger = logging.getLogger("ctxledger")  # adapters.logs.LOGGER
if not any(isinstance(h, logging.NullHandler) for h in _library_logger.handlers):
    _library_logger.addHandler(logging.NullHandler())


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
