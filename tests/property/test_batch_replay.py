"""The batch fold (drafts thawed once per batch, events dispatched by type) against the pure
folds, the specification (``tests.oracles.folds``): equal for any events cut into any batches, never
mutating the states it starts from; and on a real SQLite ledger, the runner's paged replay and
its saves equal ``fold_all`` over ``read_all``."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from ctxledger.adapters.cli.demo import run_demo
from ctxledger.adapters.ledger import open_ledger
from ctxledger.adapters.ledger.projection_runner import (
    ProjectionRunner,
    encode_state,
    replay_states,
)
from ctxledger.adapters.testing import events
from ctxledger.domain import events as ev
from ctxledger.domain.model import AgentIdentity
from ctxledger.projections.batch import SMALL_BATCH, LiveFolds, fold_batch, fold_stream
from ctxledger.projections.catalog import PROJECTIONS, ReadModels, read_models
from tests.oracles.folds import fold, fold_all

AGENTS = ("a1", "a2")
_AT = datetime(2026, 1, 1, tzinfo=UTC)


def _identity(agent_id: str) -> AgentIdentity:
    return AgentIdentity(agent_id=agent_id, role="worker")


def _retarget(event: ev.Event, data: st.DataObject, recorded: list[str]) -> ev.Event:
    """The event about one of two agents and, when it names an item, often one recorded
    before: random ids would almost never hit, leaving the acting branches untested."""
    agent_id = data.draw(st.sampled_from(AGENTS))
    if isinstance(event, ev.AgentRegistered):
        return msgspec.structs.replace(
            event, agent=msgspec.structs.replace(event.agent, agent_id=agent_id)
        )
    changes: dict[str, Any] = {}
    if hasattr(event, "agent_id"):
        changes["agent_id"] = agent_id
    if hasattr(event, "item_id") and recorded and data.draw(st.booleans()):
        changes["item_id"] = data.draw(st.sampled_from(recorded))
    if isinstance(event, ev.GenerationRefreshed) and recorded:
        changes["dropped"] = tuple(data.draw(st.lists(st.sampled_from(recorded), max_size=3)))
    if isinstance(event, ev.ContextPackBuilt):
        # packs of the agent's first generations (others are ignored) and decision points
        changes["generation"] = data.draw(st.sampled_from([1, 1, 2, event.generation]))
        changes["purpose"] = data.draw(st.sampled_from(["", "decision_point", event.purpose]))
    if isinstance(event, (ev.ItemRecorded, ev.SteeringNoteAdded)):
        recorded.append(event.item.id)
    return msgspec.structs.replace(event, **changes) if changes else event


@st.composite
def histories(draw: st.DrawFn) -> list[ev.Event]:
    data = draw(st.data())
    recorded: list[str] = []
    raw = draw(st.lists(events(), max_size=40))
    return [_retarget(e, data, recorded) for e in raw]


def _encoded(models: ReadModels) -> bytes:
    return msgspec.json.encode(models)


@settings(max_examples=150, deadline=None)
@given(histories(), st.data())
def test_batch_fold_equals_the_pure_folds_under_any_cuts(
    seq: list[ev.Event], data: st.DataObject
) -> None:
    whole = fold_all(seq)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(seq)), max_size=4)))
    states = fold_all([])
    start = 0
    for cut in [*cuts, len(seq)]:
        before = _encoded(states)
        nxt = fold_batch(states, seq[start:cut])
        assert _encoded(states) == before  # the states it started from are untouched
        states = nxt
        start = max(start, cut)
    assert states == whole
    assert _encoded(states) == _encoded(whole)  # same order of agents and items, too


@settings(max_examples=60, deadline=None)
@given(histories())
def test_named_batch_fold_of_a_subset_of_projections(seq: list[ev.Event]) -> None:
    chosen = PROJECTIONS[::2]
    states = {p.name: p.initial() for p in chosen}
    folded = fold_batch(states, seq, chosen)
    assert folded == {p.name: fold(p, seq) for p in chosen}
    assert states == {p.name: p.initial() for p in chosen}


@settings(max_examples=150, deadline=None)
@given(histories(), st.data())
def test_live_folds_equal_the_pure_folds_and_never_change_a_snapshot(
    seq: list[ev.Event], data: st.DataObject
) -> None:
    """Folds kept open across feeds, read (one projection or all) at random points: every
    read equals the pure folds of the prefix fed so far, and stays equal after later feeds."""
    live = LiveFolds({p.name: p.initial() for p in PROJECTIONS}, PROJECTIONS)
    names = [p.name for p in PROJECTIONS]
    snapshots: list[tuple[int, str, Any, bytes]] = []
    cuts = sorted(data.draw(st.lists(st.integers(0, len(seq)), max_size=6)))
    start = 0
    for cut in [*cuts, len(seq)]:
        live.feed(seq[start:cut])
        start = max(start, cut)
        for name in data.draw(st.lists(st.sampled_from(names), max_size=3)):
            state = live.get(name)
            snapshots.append((start, name, state, msgspec.json.encode(state)))
    final = live.all()
    assert read_models(final) == fold_all(seq)
    for upto, name, state, encoded in snapshots:
        assert msgspec.json.encode(state) == encoded  # never mutated by a later feed
        assert encoded == msgspec.json.encode(getattr(fold_all(seq[:upto]), name))


@settings(max_examples=150, deadline=None)
@given(histories(), st.data())
def test_stream_fold_equals_the_pure_folds_from_any_start(
    seq: list[ev.Event], data: st.DataObject
) -> None:
    """``fold_stream`` (what a replay does: one batch over a stream of events, however long)
    from the models of any prefix equals the pure folds, and never mutates those models."""
    cut = data.draw(st.integers(0, len(seq)))
    chosen = data.draw(st.sampled_from([PROJECTIONS, PROJECTIONS[1::2]]))
    start = {p.name: getattr(fold_all(seq[:cut]), p.name) for p in chosen}
    before = {name: msgspec.json.encode(state) for name, state in start.items()}
    folded = fold_stream(start, (e for e in seq[cut:]), chosen)  # an iterator, not a list
    assert {name: msgspec.json.encode(state) for name, state in start.items()} == before
    whole = fold_all(seq)
    for p in chosen:
        assert folded[p.name] == getattr(whole, p.name)
        assert msgspec.json.encode(folded[p.name]) == msgspec.json.encode(getattr(whole, p.name))


def test_small_batches_take_the_pure_path_and_agree() -> None:
    # A sanity anchor for the cut-off itself: batches of every size around it agree.
    seq = [ev.AgentRegistered(agent=_identity(f"a{i}"), at=_AT) for i in range(SMALL_BATCH * 2 + 1)]
    for size in range(SMALL_BATCH * 2 + 2):
        assert fold_batch(fold_all([]), seq[:size]) == fold_all(seq[:size])


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    root: Path = tmp_path_factory.mktemp("demo")
    summary = run_demo(root / "demo.db", console=Console(quiet=True), as_json=False)
    return str(summary["store"])


def test_paged_replay_and_runner_equal_fold_all_on_a_real_ledger(demo_store: str) -> None:
    with open_ledger(demo_store) as ledger:
        log = [r.event for r in ledger.read_all()]
        assert len(log) > 50
        expected = fold_all(log)
        states, count, last = replay_states(ledger)
        assert count == len(log)
        assert read_models(states) == expected
        half = len(log) // 2
        partial, count, last = replay_states(ledger, upto=half)
        assert (count, last) == (half, half)
        assert read_models(partial) == fold_all(log[:half])
        for page in (1, 7, len(log), len(log) + 1):  # the stream across page boundaries
            stream = ledger.events(after=3, upto=half, page=page)
            assert (stream.count, stream.last) == (0, 3)
            assert list(stream) == log[3:half]
            assert (stream.count, stream.last) == (half - 3, half)

        # A runner folding in pages of 7, saving at the end, then reloaded from the save.
        runner = ProjectionRunner(ledger, batch_size=7)
        runner.states = {p.name: p.initial() for p in PROJECTIONS}
        runner.position = 0
        runner._saved_position = 0  # as if nothing had been saved
        assert runner.run_once() == len(log)
        assert runner.models == expected
        reloaded = ProjectionRunner(ledger)
        assert reloaded.position == runner.position
        assert {n: encode_state(s) for n, s in reloaded.states.items()} == {
            n: encode_state(s) for n, s in runner.states.items()
        }


def test_runner_saves_once_at_the_end_of_a_short_catch_up(demo_store: str) -> None:
    with open_ledger(demo_store) as ledger:
        runner = ProjectionRunner(ledger, batch_size=5)
        runner.states = {p.name: p.initial() for p in PROJECTIONS}
        runner.position = runner._saved_position = 0
        saves: list[int] = []
        real_save = ledger.save_projections

        def counting(states: dict[str, bytes], position: int) -> None:
            saves.append(position)
            real_save(states, position)

        ledger.save_projections = counting  # type: ignore[method-assign]
        total = runner.run_once()
        assert total > 5 * 3  # many pages...
        assert saves == [runner.position]  # ...one save, at the end
        assert runner.run_once() == 0
        assert saves == [runner.position]  # nothing new: nothing saved
