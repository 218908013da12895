"""A real non-Python client: tests/api_client_go/main.go (Go, standard library only) runs a
50-turn loop against `ctxledger api` — record (each sent twice with one Idempotency-Key),
build + render, usage, a context-limit turn error every tenth turn — and the ledger it leaves
passes `ctxledger audit --rederive` and `replay --verify`. Skips when `go` is absent, fails then under CI=true."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ctxledger.adapters.ledger import open_ledger
from ctxledger.domain import events as ev
from tests.api_server import CTXLEDGER, audit_rederive, running_api

GO_CLIENT = Path(__file__).parents[1] / "api_client_go"
TOKEN = "go-client-token-0123456789abcdef"


def _go() -> str:
    go = shutil.which("go") or ("/usr/bin/go" if Path("/usr/bin/go").is_file() else None)
    if go is None:
        if os.environ.get("CI") == "true":
            pytest.fail("`go` not found and CI=true (install Debian's golang package)")
        pytest.skip("`go` not found (install Debian's golang package to run the Go client)")
    return go


def test_the_go_client_runs_50_turns_and_the_ledger_audits_clean(tmp_path: Path) -> None:
    go = _go()
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    env = {
        **os.environ,
        "GOCACHE": os.environ.get("GOCACHE", "/tmp/ctxledger-go-cache"),
        "GOFLAGS": "-mod=mod",
        "GO111MODULE": "on",
        "CGO_ENABLED": "0",
    }
    with running_api(url, "--token", TOKEN) as server:
        done = subprocess.run(
            [go, "run", ".", "-base", server.base, "-token", TOKEN, "-turns", "50"],
            cwd=GO_CLIENT,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
            env=env,
        )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary == {
        "agent": "go-orchestrator",
        "turns": 50,
        "generation": 6,
        "generations_seen": 6,
    }
    with open_ledger(url, must_exist=True, read_only=True) as ledger:
        events = [r.event for r in ledger.read_all()]
    recorded = [e for e in events if isinstance(e, ev.ItemRecorded)]
    assert len(recorded) == 51  # the task, then one per turn: every retry answered, not appended
    assert sum(isinstance(e, ev.ContextPackBuilt) for e in events) == 50 + 5
    assert sum(isinstance(e, ev.CacheUsageRecorded) for e in events) == 45
    audited = audit_rederive(url)
    assert audited.returncode == 0, audited.stdout
    assert "audit clean" in audited.stdout
    assert " 0 mismatches" in audited.stdout
    verified = subprocess.run(  # the read models the server saved at its stop are the log's
        [CTXLEDGER, "replay", "--verify", "--store", url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
