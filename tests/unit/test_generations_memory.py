"""Kept generations share equal decisions instead of holding a decoded copy of each.

A rebuild repeats most of the previous generation's decisions (the same items dropped over
budget with the same counts). Each kept generation costs a map, not a new object per decision:
the replayed read model reuses the previous generation's equal decision. Saved, the model
holds each generation's decisions as a delta against the previous generation's.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.clock import SteppingClock
from ctxledger.adapters.ledger import open_ledger
from ctxledger.adapters.ledger.projection_runner import encode_state, replay_states
from ctxledger.domain.model import AgentIdentity


def _drive(url: str, *, turns: int) -> None:
    """One agent recording a line and building with a 300-token budget every turn (a
    rebuild every few turns)."""
    clock = SteppingClock(datetime(2026, 1, 1, tzinfo=UTC), timedelta(milliseconds=10))
    with open_engine(open_ledger(url), clock=clock) as engine:
        engine.register_agent(AgentIdentity(agent_id="a", role="worker", task="T-1"))
        for turn in range(turns):
            engine.record("a", f"turn {turn}: output of `make test` " * 3)
            engine.build("a", budget=300, keywords=("make",))


def test_replayed_generations_share_equal_decisions(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    _drive(url, turns=120)
    states, _, _ = replay_states(open_ledger(url))
    gens = states["generations"].by_agent["a"].generations
    assert len(gens) >= 4, "the small budget should rebuild into several generations"
    shared = equal = 0
    for older, newer in itertools.pairwise(gens):
        for item_id, d in newer.decisions.items():
            before = older.decisions.get(item_id)
            if before is not None and before == d:
                equal += 1
                shared += d is before
    assert equal > 100
    assert shared == equal


def test_saved_generations_grow_with_what_changed(tmp_path: Path) -> None:
    """The engine saves the generations model as per-generation deltas: after 240 turns with
    a rebuild every few turns, the saved row is a small part of the model's whole JSON (which
    repeats every item's decision in every generation), and reopening from it gives the model
    a replay gives."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    _drive(url, turns=240)
    with open_ledger(url) as ledger:
        saved = ledger.load_projection("generations")
        states, _, _ = replay_states(ledger)
    assert saved is not None
    whole = encode_state(states["generations"])
    assert len(states["generations"].by_agent["a"].generations) >= 20
    assert len(saved[1]) * 5 < len(whole), (len(saved[1]), len(whole))  # ~9x at 240 turns
    with open_engine(open_ledger(url)) as reopened:
        assert encode_state(reopened.runner.generations) == whole
