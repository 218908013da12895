"""Hypothesis state machine over the whole engine: record, build, usage, turn errors, manual
controls — the invariants are checked after every step and `audit` is clean at the end."""

from __future__ import annotations

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.clock import SteppingClock
from ctxledger.adapters.engine import BuildResult, ContextEngine, EngineSettings
from ctxledger.adapters.engine.rederive import rederive
from ctxledger.adapters.ledger import open_ledger
from ctxledger.adapters.ledger.projection_runner import encode_state, replay_states
from ctxledger.domain.errors import InvalidInputError, RefreshExhaustedError
from ctxledger.domain.model import AgentIdentity, Layer, Source
from ctxledger.domain.prompt import Segment
from ctxledger.domain.strategies import strategy_names
from ctxledger.projections.audit import audit
from ctxledger.projections.build_view import build_view, previous_prompt
from ctxledger.projections.inspector import inspect_agent

AGENT = "agent-1"
CONTEXT_LIMIT = {
    "type": "error",
    "error": {"type": "invalid_request_error", "message": "prompt is too long: 9999 > 999"},
}
WORDS = st.sampled_from(
    ["alpha", "beta", "fix", "auth/session.py", "Session.refresh", "test", "error"]
)


class EngineMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.engine: ContextEngine | None = None
        self.last: BuildResult | None = None
        self.exhausted = False
        self.n = 0

    @initialize(
        budget=st.integers(min_value=150, max_value=1500),
        strategy=st.sampled_from(strategy_names()),
    )
    def start(self, budget: int, strategy: str) -> None:
        self.engine = open_engine(
            open_ledger("memory://"),
            clock=SteppingClock(),
            settings=EngineSettings(session_id="s"),
        )
        self.engine.register_agent(
            AgentIdentity(agent_id=AGENT, role="primary", task="fix auth", budget=budget)
        )
        self.budget = budget
        self.strategy = strategy
        self.engine.record(
            AGENT,
            "Objective: fix the auth timeout in auth/session.py",
            layer=Layer.L1,
            source=Source.USER_REQUIREMENT,
            pinned=True,
            mandatory=True,
        )

    @precondition(lambda self: self.engine is not None and not self.exhausted)
    @rule(
        words=st.lists(WORDS, min_size=1, max_size=60),
        layer=st.sampled_from(Layer),
        source=st.sampled_from(
            [
                Source.TOOL_LOG,
                Source.TEST_RESULT,
                Source.REPOSITORY_SOURCE,
                Source.WORKER_FINDING,
                Source.CONVERSATION,
                Source.UNVERIFIED_HYPOTHESIS,
            ]
        ),
        failure=st.booleans(),
        group=st.sampled_from(["", "", "g1", "g2"]),
    )
    def record(
        self, words: list[str], layer: Layer, source: Source, failure: bool, group: str
    ) -> None:
        assert self.engine is not None
        self.n += 1
        self.engine.record(
            AGENT,
            f"obs {self.n}: " + " ".join(words),
            layer=layer,
            source=source,
            failure=failure,
            group=group,
        )

    @precondition(lambda self: self.engine is not None and not self.exhausted)
    @rule()
    def build(self) -> None:
        assert self.engine is not None
        previous = self.last
        result = self.engine.build(AGENT, budget=self.budget, strategy=self.strategy)
        pack = result.pack
        # budget respected, or overflow recorded
        assert (
            pack.budget_used <= pack.budget_limit
            or pack.overflow == pack.budget_used - pack.budget_limit
        )
        # every candidate has exactly one decision
        candidates = {i.id for i in self.engine.pool(AGENT).candidates()}
        decided = [d.item_id for d in pack.decisions]
        assert len(decided) == len(set(decided))
        assert candidates <= set(decided)
        # pinned and mandatory items are in, whole
        by_id = {d.item_id: d for d in pack.decisions}
        for item in self.engine.pool(AGENT).candidates():
            if item.pinned or item.mandatory:
                assert by_id[item.id].action == "included", by_id[item.id]
        # within a generation the stable prompt only grows by appending
        if (
            previous is not None
            and result.kind == "append"
            and previous.generation == result.generation
        ):
            assert result.prompt.stable.startswith(previous.prompt.stable)
            assert result.prompt.prefix_hash == previous.prompt.prefix_hash or (
                result.prompt.segments[Segment.SESSION] != previous.prompt.segments[Segment.SESSION]
            )
        # the previous prompt re-derived from the log alone equals what was sent (the engine
        # keeps no prompt in memory: this is what the next build's cache expectation uses)
        view = build_view(self.engine.agent(AGENT).current, self.engine.pool(AGENT))
        rederived = previous_prompt(view.emitted)
        assert rederived is not None
        assert rederived.stable == result.prompt.stable
        self.last = result
        event(f"build:{result.kind}")

    @precondition(lambda self: self.last is not None and not self.exhausted)
    @rule(read=st.integers(0, 500), fresh=st.integers(0, 500))
    def usage(self, read: int, fresh: int) -> None:
        assert self.engine is not None
        self.engine.report_usage(
            AGENT,
            {
                "input_tokens": fresh,
                "cache_read_input_tokens": read,
                "cache_creation_input_tokens": 0,
                "output_tokens": 3,
            },
        )

    @precondition(lambda self: self.last is not None and not self.exhausted)
    @rule()
    def context_limit_error(self) -> None:
        assert self.engine is not None
        assert self.last is not None
        before = self.engine.agent(AGENT).current
        try:
            outcome = self.engine.on_turn_error(AGENT, CONTEXT_LIMIT)
        except RefreshExhaustedError:
            # only after max_refreshes refreshes without a successful turn (folded from the
            # log), and the exhausted ladder wrote no generation past them
            folded = self.engine.agent(AGENT)
            assert folded.refresh_streak == EngineSettings().max_refreshes
            refreshes = [g for g in folded.generations if g.kind == "refresh"]
            assert len(refreshes) >= EngineSettings().max_refreshes
            self.exhausted = True
            return
        assert outcome.refreshed
        assert outcome.result is not None
        after = self.engine.agent(AGENT).current
        assert after.number > before.number
        assert outcome.message.startswith(f"Context refreshed · Generation {before.number} → ")
        assert outcome.result.pack.budget_used < before.tokens_used or before.tokens_used == 0
        self.last = outcome.result

    @precondition(lambda self: self.last is not None and not self.exhausted)
    @rule()
    def other_error(self) -> None:
        assert self.engine is not None
        before = self.engine.agent(AGENT).current.number
        outcome = self.engine.on_turn_error(
            AGENT, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        )
        assert not outcome.refreshed
        assert self.engine.agent(AGENT).current.number == before

    @precondition(lambda self: self.engine is not None and not self.exhausted)
    @rule(data=st.data(), action=st.sampled_from(["pin", "unpin", "remove", "verify"]))
    def control(self, data: st.DataObject, action: str) -> None:
        assert self.engine is not None
        items = self.engine.pool(AGENT).candidates()
        item = data.draw(st.sampled_from(items))
        try:
            if action == "pin":
                self.engine.pin(AGENT, item.id)
            elif action == "unpin":
                self.engine.unpin(AGENT, item.id)
            elif action == "remove":
                self.engine.remove(AGENT, item.id)
            else:
                self.engine.verify_finding(AGENT, item.id)
        except InvalidInputError:
            assert action == "remove"
            assert item.pinned or item.mandatory

    @precondition(lambda self: self.last is not None and not self.exhausted)
    @rule()
    def manual_rebuild(self) -> None:
        assert self.engine is not None
        before = self.engine.agent(AGENT).current.number
        self.last = self.engine.rebuild(AGENT, reason="test")
        assert self.engine.agent(AGENT).current.number == before + 1

    @precondition(lambda self: self.engine is not None)
    @rule(data=st.data())
    def inspect(self, data: st.DataObject) -> None:
        """The inspector reads any generation without re-running a build."""
        assert self.engine is not None
        gens = self.engine.agent(AGENT).generations
        number = data.draw(st.sampled_from([g.number for g in gens]))
        view = inspect_agent(self.engine.runner.models, AGENT, number)
        assert view.generation == number
        assert {v.id for v in view.included}.isdisjoint({v.id for v in view.excluded})

    @invariant()
    def live_equals_replay(self) -> None:
        if self.engine is None:
            return
        states, _, _ = replay_states(self.engine.ledger)
        for name, state in states.items():
            assert encode_state(self.engine.runner.states[name]) == encode_state(state), name

    @invariant()
    def generations_contiguous(self) -> None:
        if self.engine is None:
            return
        numbers = [g.number for g in self.engine.agent(AGENT).generations]
        assert numbers == list(range(1, len(numbers) + 1))

    def teardown(self) -> None:
        if self.engine is None:
            return
        records = [(r.position, r.event) for r in self.engine.ledger.read_all()]
        assert audit(records) == []
        report = rederive(self.engine.ledger.read_all())
        assert (report.mismatches, report.not_rederivable) == (0, 0), report
        assert report.rederived == report.builds
        self.engine.close()


EngineMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=50)
TestEngineMachine = EngineMachine.TestCase
