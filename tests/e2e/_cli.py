"""Runs the installed `ctxledger` command line in a subprocess, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

__all__ = ["CLI", "run"]

CLI = [sys.executable, "-m", "ctxledger.adapters.cli.main"]


def run(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`ctxledger ARGS…` in *cwd*; never raises on a non-zero exit (tests check it)."""
    return subprocess.run(
        [*CLI, *args],
        check=False,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ},
    )
