"""Options shared by the command modules (one definition each)."""

from __future__ import annotations

from typing import Annotated

import typer

__all__ = ["JsonOpt", "StoreOpt"]

StoreOpt = Annotated[
    str,
    typer.Option(
        "--store",
        envvar="CTXLEDGER_STORE",
        help="Ledger URL: memory://, sqlite:///path, postgresql://…",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object for machines.")]
