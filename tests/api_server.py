"""`ctxledger api` as an orchestrator starts it: the installed console script in a subprocess on
a free port, ready once it printed its address (tests/integration/test_api*.py, tests/e2e)."""

from __future__ import annotations

import os
import re
import selectors
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CTXLEDGER", "ApiServer", "audit_rederive", "running_api"]

CTXLEDGER = str(Path(sys.executable).parent / "ctxledger")
"""The installed console script (``.venv/bin/ctxledger``)."""

_ADDRESS = re.compile(r"http://([^/\s]+):(\d+)/v1/")


@dataclass(frozen=True)
class ApiServer:
    base: str
    """``http://127.0.0.1:PORT``"""
    proc: subprocess.Popen[str]


@contextmanager
def running_api(store: str, *extra: str, env: dict[str, str] | None = None) -> Iterator[ApiServer]:
    """``ctxledger api --store STORE --port 0 EXTRA…``; yields once it printed its address,
    stops it (SIGTERM, then its exit is awaited) after."""
    proc = subprocess.Popen(
        [CTXLEDGER, "api", "--store", store, "--port", "0", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    try:
        assert proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + 30
        line = ""
        while time.monotonic() < deadline and not line:
            if sel.select(timeout=0.2):
                line = proc.stdout.readline()
                if not line:
                    break
        m = _ADDRESS.search(line)
        if m is None:
            proc.kill()
            _, err = proc.communicate(timeout=10)
            raise AssertionError(f"ctxledger api did not start: {line!r} {err!r}")
        yield ApiServer(base=f"http://{m.group(1)}:{m.group(2)}", proc=proc)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def audit_rederive(store: str) -> subprocess.CompletedProcess[str]:
    """``ctxledger audit --rederive --store STORE`` (never raises; the caller checks)."""
    return subprocess.run(
        [CTXLEDGER, "audit", "--rederive", "--store", store],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
