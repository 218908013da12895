"""Read models saved past the end of the log (a deleted WAL, an older file restored under
newer models) are never trusted: the engine rebuilds them, so new records are folded, and
`replay --verify` reports the loss instead of "equal"."""

from __future__ import annotations

import json
from pathlib import Path

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.ledger import open_ledger
from ctxledger.adapters.ledger.projection_runner import ProjectionRunner, encode_state
from ctxledger.domain.model import AgentIdentity
from tests.e2e._cli import run

AHEAD = 1_000


def _store_with_models_ahead(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    engine = open_engine(url)
    engine.register_agent(AgentIdentity(agent_id="a", role="worker"))
    engine.record("a", "first observation")
    engine.checkpoint()
    states = {n: encode_state(s) for n, s in engine.runner.states.items()}
    engine.close()
    with open_ledger(url) as ledger:
        ledger.save_projections(states, ledger.max_position() + AHEAD)
    return url


def test_models_ahead_are_rebuilt_and_new_records_folded(tmp_path: Path) -> None:
    url = _store_with_models_ahead(tmp_path)
    with open_ledger(url) as ledger:
        runner = ProjectionRunner(ledger)
        assert runner.ahead == AHEAD
        assert runner.position == 0  # discarded, folded again from the start
    engine = open_engine(url)
    item = engine.record("a", "recorded after the loss")
    assert item.id in engine.pool("a").items  # folded, not skipped as "already applied"
    assert engine.runner.position == engine.ledger.max_position()
    engine.checkpoint()
    engine.close()
    with open_ledger(url) as ledger:  # saved again at the real end: no longer ahead
        assert ProjectionRunner(ledger).ahead == 0


def test_replay_verify_reports_models_ahead(tmp_path: Path) -> None:
    url = _store_with_models_ahead(tmp_path)
    out = run("replay", "--store", url, "--verify", "--json", cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert json.loads(out.stdout.splitlines()[0])["ahead"] == AHEAD
    assert "past the end of the log" in out.stderr
    assert "Traceback" not in out.stderr
