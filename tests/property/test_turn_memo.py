"""The engine's turn memo equals recomputing from the folded log, after every operation.

A turn plans on the memo of the agent's last pack brought up to date by the ids the pool
touched since (``projections.turn_memo``); the specification is the pass over every decision
and candidate (``emitted_context``, ``append_facts``, ``memo_from_scratch``). One engine on a
real SQLite file runs random operations — recordings, steering notes of several stages,
pins, verifications, removals, builds of random stages (some with the latest-step policy),
decision points, rebuilds and refreshes — and after every step the memo it would plan the
next turn on is held equal to the from-scratch one, field by field, with the append facts for
random kept ids and stages. A second engine planning every build on ``build_view`` (the
passes over the history) records byte-identical events.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from ctxledger.adapters.engine import ContextEngine, EngineSettings
from ctxledger.adapters.ledger import open_ledger, stream_id_for
from ctxledger.adapters.tokens import default_counter
from ctxledger.domain import events as ev
from ctxledger.domain.errors import CtxLedgerError
from ctxledger.domain.generation_policy import append_facts
from ctxledger.domain.model import (
    AgentIdentity,
    Decision,
    DecisionAction,
    Generation,
    Item,
    Layer,
    Source,
)
from ctxledger.projections.build_view import BuildView, build_view
from ctxledger.projections.pool import TOUCHED_MAX, AgentPool, Pool, PoolBatch
from ctxledger.projections.turn_memo import (
    TurnMemo,
    emitted_context,
    memo_from_scratch,
    turn_view,
)
from tests.oracles.folds import evolve_pool
from tests.property.strategies_items import pool_items
from tests.property.test_restart_transparency import FixedClock

SESSION = "turn-memo"
COUNTER = default_counter()
STAGES = ["", "plan", "fix"]
WORDS = st.sampled_from(["alpha", "fix", "auth/session.py", "error", "test", "retry"])
_agents = itertools.count()


class TurnMemoMachine(RuleBasedStateMachine):
    """Subclassed with ``root`` set to a fresh directory."""

    root: Path = Path()

    def __init__(self) -> None:
        super().__init__()
        self.clock = FixedClock()
        n = next(_agents)
        self.memo_engine = self._open(self.root / f"memo-{os.getpid()}-{n}.db")
        self.scratch_engine = self._open(self.root / f"scratch-{os.getpid()}-{n}.db", ScratchEngine)
        self.agent = "agent"
        self.n = 0

    def _open(self, path: Path, kind: type[ContextEngine] = ContextEngine) -> ContextEngine:
        return kind(
            open_ledger(f"sqlite:///{path}"),
            counter=COUNTER,
            clock=self.clock,
            settings=EngineSettings(session_id=SESSION, max_refreshes=3),
        )

    def both(self, op: Callable[[ContextEngine], Any]) -> None:
        self.clock.at += timedelta(seconds=1)
        outcomes = []
        for engine in (self.memo_engine, self.scratch_engine):
            try:
                op(engine)
                outcomes.append("ok")
            except CtxLedgerError as exc:
                outcomes.append(f"{type(exc).__name__}: {exc}")
        assert outcomes[0] == outcomes[1], outcomes

    @initialize(budget=st.integers(min_value=150, max_value=1200))
    def register(self, budget: int) -> None:
        identity = AgentIdentity(
            agent_id=self.agent, role="primary", task="fix auth", budget=budget
        )
        self.both(lambda e: e.register_agent(identity))

    @rule(
        words=st.lists(WORDS, min_size=1, max_size=40),
        layer=st.sampled_from(Layer),
        source=st.sampled_from([Source.TOOL_LOG, Source.TEST_RESULT, Source.WORKER_FINDING]),
        group=st.sampled_from(["", "g1"]),
        flags=st.sampled_from(["", "pinned", "mandatory", "failure"]),
    )
    def record(
        self, words: list[str], layer: Layer, source: Source, group: str, flags: str
    ) -> None:
        self.n += 1
        text = f"obs {self.n}: " + " ".join(words)
        kwargs: dict[str, Any] = {"layer": layer, "source": source, "group": group}
        if flags:
            kwargs[flags] = True
        self.both(lambda e: e.record(self.agent, text, **kwargs))

    @rule(data=st.data())
    def record_again(self, data: st.DataObject) -> None:
        """An item observed again (after a removal it is back in the pool)."""
        items = list(self.memo_engine.pool(self.agent).items.values())
        if items:
            item = data.draw(st.sampled_from(items))
            self.both(lambda e: e.record(self.agent, item))

    @rule(stage=st.sampled_from(STAGES), words=st.lists(WORDS, min_size=1, max_size=6))
    def steer(self, stage: str, words: list[str]) -> None:
        self.n += 1
        text = f"note {self.n}: " + " ".join(words)
        self.both(lambda e: e.add_steering_note(self.agent, text, stage=stage))

    @rule(
        stage=st.sampled_from(STAGES),
        budget=st.none() | st.integers(min_value=120, max_value=1200),
        latest=st.booleans(),
        point=st.integers(min_value=0, max_value=5),
    )
    def build(self, stage: str, budget: int | None, latest: bool, point: int) -> None:
        purpose: Literal["prompt", "decision_point"] = "decision_point" if point == 0 else "prompt"
        self.both(lambda e: e.configure(self.agent, latest_step=latest))
        self.both(
            lambda e: e.build(
                self.agent, stage_id=stage, budget=budget, keywords=["auth"], purpose=purpose
            )
        )

    @rule(data=st.data(), action=st.sampled_from(["pin", "unpin", "verify", "remove"]))
    def control(self, data: st.DataObject, action: str) -> None:
        items = list(self.memo_engine.pool(self.agent).items)
        if not items:
            return
        item_id = data.draw(st.sampled_from(items))
        calls: dict[str, Callable[[ContextEngine], Any]] = {
            "pin": lambda e: e.pin(self.agent, item_id),
            "unpin": lambda e: e.unpin(self.agent, item_id),
            "verify": lambda e: e.verify_finding(self.agent, item_id),
            "remove": lambda e: e.remove(self.agent, item_id),
        }
        self.both(calls[action])

    @rule(kind=st.sampled_from(["rebuild", "refresh"]))
    def manual(self, kind: str) -> None:
        engine = self.memo_engine
        before = engine.agent(self.agent).current.number
        if kind == "rebuild":
            self.both(lambda e: e.rebuild(self.agent, reason="test"))
        else:
            self.both(lambda e: e.refresh(self.agent, reason="test"))
        # A new generation's first pack left the memo the next turn plans on (the invariant
        # below holds it equal to recomputing it): no pass over the history on that turn.
        gen = engine.agent(self.agent).current
        if gen.number != before and gen.decisions:
            memo = engine._turns.get(self.agent)
            assert memo is not None
            assert (memo.pack_id, memo.generation) == (gen.last_pack_id, gen.number)

    @invariant()
    def the_memo_is_the_recomputed_one(self) -> None:
        engine = self.memo_engine
        if self.agent not in engine.states.generations.by_agent:
            return
        gen, pool = engine.agent(self.agent).current, engine.pool(self.agent)
        memo = engine._turns.get(self.agent)
        view = turn_view(memo, gen, pool)
        scratch = memo_from_scratch(gen, pool)
        if view is None:
            assert scratch is None
            return
        assert scratch is not None
        assert view.memo == msgspec.structs.replace(scratch, pack_id=view.memo.pack_id)
        ctx = emitted_context(gen, pool)
        assert ctx is not None
        assert view.context() == msgspec.structs.replace(ctx, included=scratch.included)
        candidates = tuple(pool.candidates())
        ids = [c.id for c in candidates]
        for stage in STAGES:
            for keep in (frozenset(), frozenset(ids[-3:]), frozenset(ids[::2])):
                assert view.facts(keep, stage) == append_facts(candidates, ctx, keep, stage)

    @invariant()
    def same_events(self) -> None:
        stream = stream_id_for(SESSION, self.agent)
        a = [msgspec.json.encode(r.event) for r in self.memo_engine.ledger.read_stream(stream)]
        b = [msgspec.json.encode(r.event) for r in self.scratch_engine.ledger.read_stream(stream)]
        assert a == b

    def teardown(self) -> None:
        self.memo_engine.close()
        self.scratch_engine.close()


class ScratchEngine(ContextEngine):
    """An engine that plans every build on ``build_view``: passes over the whole history,
    the specification (what ``audit --rederive`` plans on)."""

    def _view(
        self, agent_id: str, gen: Generation, purpose: str, force_rebuild: str = ""
    ) -> BuildView:
        return build_view(gen, self.pool(agent_id), purpose)


def test_the_turn_memo_equals_recomputing_it(tmp_path: Path) -> None:
    machine = type("Machine", (TurnMemoMachine,), {"root": tmp_path})
    examples = 400 if os.environ.get("CTXLEDGER_SOAK") else 120
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


def test_the_touched_list_is_bounded_and_the_batch_fold_agrees() -> None:
    """Past ``TOUCHED_MAX`` ids the pool forgets what it touched (``touched_since`` empty): a
    pool that records without building keeps a bounded read model, and the next build
    recomputes its memo. The pure fold and the batch fold agree at and past the bound."""
    at = datetime(2026, 2, 1, tzinfo=UTC)
    recordings = [
        ev.ItemRecorded(
            at=at,
            agent_id="a",
            item=Item(id=f"i{k}", content=f"item {k}", layer=Layer.L0, source=Source.TOOL_LOG),
        )
        for k in range(TOUCHED_MAX + 20)
    ]
    built = ev.ContextPackBuilt(at=at, agent_id="a", pack_id="a/g1/v9")
    head: list[ev.Event] = [*recordings[:10], built, *recordings[10:]]
    pure = Pool()
    for event in head:
        pure = evolve_pool(pure, event)
    pool = pure.by_agent["a"]
    after_pack = len(head) - head.index(built) - 1
    assert after_pack > TOUCHED_MAX
    # the list restarted empty when it reached the bound, then took the ids after it
    assert (pool.touched_since, len(pool.touched)) == ("", after_pack - TOUCHED_MAX - 1)
    for cut in (1, 7, TOUCHED_MAX, len(head) - 1):
        batch = Pool()
        for start in range(0, len(head), cut):
            fold = PoolBatch(batch)
            handlers = fold.handlers()
            for event in head[start : start + cut]:
                handlers[type(event)](event)
            batch = fold.freeze()
        assert batch == pure


def _memo_by_plain_passes(gen: Generation, pool: AgentPool) -> TurnMemo | None:
    """``memo_from_scratch`` as one plain pass per field (what it computes with set
    operations and C iterators)."""
    ctx = emitted_context(gen, pool)
    if ctx is None:
        return None
    items, removed = pool.items, pool.removed
    dropped = [i for i, d in gen.decisions.items() if d.action == "dropped"]
    return TurnMemo(
        pack_id=gen.last_pack_id,
        generation=gen.number,
        emitted=ctx.emitted,
        included=len(gen.decisions) - len(dropped),
        undecided=frozenset(i for i in items if i not in gen.decisions and i not in removed),
        forced_dropped=frozenset(
            i for i in dropped if i in items and i not in removed and _forced(items[i])
        ),
        gone=frozenset(i for i in ctx.emitted if i in removed),
        notes=frozenset(i for i, it in ctx.emitted.items() if it.source is Source.STEERING_NOTE),
        forced_cut=frozenset(
            i
            for i, it in ctx.emitted.items()
            if gen.decisions[i].action in ("clipped", "compressed")
            and i not in removed
            and _forced(it)
        ),
    )


def _forced(it: Item) -> bool:
    return it.pinned or it.mandatory or it.source is Source.ROLE_INSTRUCTION


_MEMO_IDS = [f"i{n}" for n in range(10)]


@st.composite
def _generations_and_pools(draw: st.DrawFn) -> tuple[Generation, AgentPool]:
    """A generation's decisions and a pool that may have moved on since (ids decided but no
    longer held, held but undecided, removed, pinned or mandatory)."""
    held = draw(st.lists(st.sampled_from(_MEMO_IDS), unique=True))
    items = {}
    for item_id in held:
        item = draw(pool_items(item_id=item_id))
        flags = draw(st.sampled_from(["", "", "pinned", "mandatory", "both"]))
        items[item_id] = msgspec.structs.replace(
            item,
            pinned=flags in ("pinned", "both"),
            mandatory=flags in ("mandatory", "both"),
        )
    removed = dict.fromkeys(draw(st.lists(st.sampled_from(_MEMO_IDS), unique=True)), "removed")
    kinds: list[DecisionAction] = ["dropped", "dropped", "included", "compressed", "clipped"]
    actions = st.sampled_from(kinds)
    decisions = {
        i: Decision(item_id=i, action=draw(actions), content="sent text", tokens_after=3)
        for i in draw(st.lists(st.sampled_from(_MEMO_IDS), unique=True))
    }
    order = tuple(i for i, d in decisions.items() if d.action != "dropped")
    gen = Generation(number=2, last_pack_id="p1", decisions=decisions, order=order)
    return gen, AgentPool(items=items, removed=removed, verified={})


@given(case=_generations_and_pools())
def test_the_memo_from_scratch_is_the_plain_passes(case: tuple[Generation, AgentPool]) -> None:
    gen, pool = case
    assert memo_from_scratch(gen, pool) == _memo_by_plain_passes(gen, pool)
