"""A writer stopped (SIGSTOP) while it holds a stream or the file's write turn keeps the other
writers waiting for the documented bound only: a stream's turn ends in ``ConflictError``
after the lock timeout (30 s by default), the file's write turn in ``LedgerUnavailableError``
after ``WRITE_TURN_TIMEOUT_S`` (30 s); once the stopped writer goes on or dies, writers pass.
The test shortens both timeouts; the defaults are checked to be the documented 30 s."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ctxledger.adapters.engine import EngineSettings
from ctxledger.adapters.ledger import WRITE_TURN_TIMEOUT_S, Ledger, open_ledger
from ctxledger.adapters.ledger.locks import DEFAULT_TIMEOUT_S
from ctxledger.domain import events as ev
from ctxledger.domain.errors import ConflictError, LedgerUnavailableError
from tests.reliability._support import record, rerun
from tests.reliability._workers import AT

WAIT_S = 1.0
"""The shortened timeout the waiting writer uses."""

STOPPED = textwrap.dedent(
    """
    import sys, time
    from ctxledger.adapters.ledger import open_ledger
    ledger = open_ledger(sys.argv[1])
    hold = ledger._write_turn() if sys.argv[2] == "write turn" else ledger.stream_lock(sys.argv[2])
    with hold:
        print("held", flush=True)
        time.sleep(600)
    """
)


@contextmanager
def stopped_writer(url: str, what: str) -> Iterator[subprocess.Popen[str]]:
    """A writer process holding *what* (a stream, or ``write turn``), then SIGSTOPped."""
    proc = subprocess.Popen(
        [sys.executable, "-c", STOPPED, url, what], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "held"
        os.kill(proc.pid, signal.SIGSTOP)
        yield proc
    finally:
        if proc.poll() is None:  # still there (stopped): let it go, then end it
            os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()


def _append(ledger: Ledger, stream: str) -> None:
    version = ledger.stream_version(stream)
    event = ev.ContextPackBuilt(at=AT, agent_id="a", pack_id=f"p{version}")
    with ledger.stream_lock(stream, timeout=WAIT_S):
        ledger.append(stream, [event], expected_version=version)


def test_the_default_waits_are_the_documented_30_s() -> None:
    assert DEFAULT_TIMEOUT_S == 30.0
    assert WRITE_TURN_TIMEOUT_S == 30.0
    assert EngineSettings().lock_timeout_s == 30.0


@pytest.mark.parametrize("held", ["stream", "write turn"])
def test_a_stopped_writer_stalls_others_for_the_bound_only(tmp_path: Path, held: str) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    stream = "ctx/agent/a"
    with open_ledger(url) as ledger:
        ledger.write_turn_timeout_s = WAIT_S
        _append(ledger, stream)
        with stopped_writer(url, stream if held == "stream" else "write turn") as proc:
            started = time.monotonic()
            expected = ConflictError if held == "stream" else LedgerUnavailableError
            with pytest.raises(expected) as caught:
                _append(ledger, stream)
            waited = time.monotonic() - started
            assert WAIT_S <= waited < WAIT_S + 2.0, f"waited {waited:.2f} s"
            assert "held the stream" in str(caught.value) or "stopped or hung" in str(caught.value)
            os.kill(proc.pid, signal.SIGKILL)  # a writer that dies releases what it held
            proc.wait(timeout=30)
            started = time.monotonic()
            _append(ledger, stream)
            resumed = time.monotonic() - started
        assert resumed < 2.0
        assert ledger.stream_version(stream) == 2
    record(
        f"stopped writer · sqlite · {held}",
        scale=f"one writer SIGSTOPped holding the {held}; another appends (timeout {WAIT_S:g} s)",
        result=(
            f"{expected.__name__} after {waited:.2f} s (bound {WAIT_S:g} s; default 30 s); "
            f"after the stopped writer was killed the append went through in "
            f"{1000 * resumed:.0f} ms"
        ),
        rerun_cmd=rerun("test_stopped_writer.py") + f" -k '{held}'",
        waited_s=round(waited, 2),
        resumed_ms=round(1000 * resumed, 1),
    )
