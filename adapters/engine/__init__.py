"""ContextEngine: a thin facade over the ledger. Every use case reads the folded log, decides
with a pure function and appends what it decided; nothing that decides a build lives outside
the log (settings, the previous prompt, the refresh count and the window are all folded).

Builds are recorded in two commits: ``ContextBuildingStarted`` with the whole request, then
the outcome (``ContextPackBuilt``, ``ContextBuildingFailed`` or ``ContextBuildingInterrupted``),
planned on exactly the state at the Started, so ``audit --rederive`` can re-run every build.

One module per use case, each over the shared ``core.EngineCore`` (ledger, read models,
``decide_and_append``): ``intake`` (agents, settings, items, secret screening), ``build``
(the two-commit protocol), ``refresh`` (turn errors, refresh, rebuild), ``render``,
``memory`` (project memory, parent reports, erase), ``usage`` and ``controls``.
"""

from __future__ import annotations

from ctxledger.adapters.clock import SystemClock
from ctxledger.adapters.engine.controls import Controls
from ctxledger.adapters.engine.core import BuildResult, EngineSettings
from ctxledger.adapters.engine.intake import Intake
from ctxledger.adapters.engine.memory import Memory
from ctxledger.adapters.engine.refresh import Refresh, TurnErrorOutcome
from ctxledger.adapters.engine.render import Render
from ctxledger.adapters.engine.usage import Usage

__all__ = [
    "BuildResult",
    "ContextEngine",
    "EngineSettings",
    "SystemClock",
    "TurnErrorOutcome",
]


class ContextEngine(Intake, Controls, Memory, Refresh, Render, Usage):
    """The context engine for one ledger (open it with ``adapters.bootstrap.open_engine``)."""

    def __enter__(self) -> ContextEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
