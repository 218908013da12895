"""Options shared by the command modules (one definition each)."""

from __future__ import annotations

from typing import Annotated

import typer

__all__ = ["EncryptOpt", "JsonOpt", "StoreOpt"]

StoreOpt = Annotated[
    str,
    typer.Option(
        "--store",
        envvar="CTXLEDGER_STORE",
        help="Ledger URL: memory://, sqlite:///path, postgresql://…",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object for machines.")]
EncryptOpt = Annotated[
    bool | None,
    typer.Option(
        "--encrypt/--no-encrypt",
        help="Seal a new ledger's content under the master key (CTXLEDGER_MASTER_KEY or "
        "--key-file); default: yes when a master key is configured.",
    ),
]
