"""The testing kit's ContextState machine, subclassed against a real SQLite ledger.

After every step: replay of the whole log == the incrementally folded state == the model.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import settings

from ctxledger.adapters.ledger import Ledger, open_ledger
from ctxledger.adapters.ledger.projection_runner import ProjectionRunner, replay_states
from ctxledger.adapters.testing import ContextStateMachine
from ctxledger.domain import events as ev
from ctxledger.projections.catalog import read_models
from ctxledger.projections.context_state import ContextState, ContextStates


class SQLiteLedgerMachine(ContextStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self._dir = tempfile.TemporaryDirectory()
        self.ledger: Ledger = open_ledger(f"sqlite:///{Path(self._dir.name) / 'l.db'}")
        self.runner = ProjectionRunner(self.ledger)
        self.version = 0

    def record(self, event: ev.Event) -> None:
        for rec in self.ledger.append("ctx/s/agent-1", [event], expected_version=self.version):
            self.runner.apply(rec.position, rec.event)
            self.version = rec.version

    def observed_state(self) -> ContextState:
        states, _, _ = replay_states(self.ledger)
        replayed: ContextStates = read_models(states).context_state
        live: ContextStates = self.runner.models.context_state
        assert replayed == live
        return replayed.by_agent.get(self.agent_id, ContextState())

    def teardown(self) -> None:
        self.ledger.close()
        self._dir.cleanup()


SQLiteLedgerMachine.TestCase.settings = settings(max_examples=15, stateful_step_count=15)
TestSQLiteLedgerMachine = SQLiteLedgerMachine.TestCase
