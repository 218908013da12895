"""Decoder fuzzing: generated and mutated stored payloads and topics. Every failure is the
typed DecodeError, nothing is imported, and nothing is ever partially applied."""

from __future__ import annotations

import builtins
import importlib
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from eventsourcing.persistence import StoredEvent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxledger.adapters.ledger import open_ledger
from ctxledger.adapters.ledger.projection_runner import (
    ProjectionRunner,
    encode_state,
    replay_states,
)
from ctxledger.adapters.testing import events
from ctxledger.domain import events as ev
from ctxledger.domain.codec import decode_event, encode_event
from ctxledger.domain.errors import DecodeError
from ctxledger.domain.events import EVENT_TYPES
from ctxledger.projections.catalog import PROJECTIONS
from tests.reliability._mutate import HOSTILE_TOPICS, mutate, mutate_topic
from tests.reliability._support import pick, record, rerun

BASE_EXAMPLES = pick(400, 4000)
MUTATIONS_PER_EXAMPLE = 50
JSON_EXAMPLES = pick(300, 3000)
MINIMUM_PAYLOADS = 20_000
AT = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Tally:
    payloads: int = 0
    accepted: int = 0
    typed: Counter[str] = field(default_factory=Counter)
    untyped: list[str] = field(default_factory=list)
    imports: list[str] = field(default_factory=list)
    fold_errors: list[str] = field(default_factory=list)
    runner_checks: int = 0


class ImportSpy(importlib.abc.MetaPathFinder):
    """Records every import attempted while ``active`` (new modules via the meta path, any
    module via ``__import__`` / ``importlib.import_module``)."""

    def __init__(self) -> None:
        self.active = False
        self.seen: list[str] = []

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: Any = None) -> None:
        if self.active:
            self.seen.append(f"meta_path:{fullname}")


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> ImportSpy:
    finder = ImportSpy()
    real_import = builtins.__import__
    real_import_module = importlib.import_module

    def spy_import(name: str, *args: Any, **kwargs: Any) -> Any:
        if finder.active:
            finder.seen.append(f"__import__:{name}")
        return real_import(name, *args, **kwargs)

    def spy_import_module(name: str, package: str | None = None) -> Any:
        if finder.active:
            finder.seen.append(f"import_module:{name}")
        return real_import_module(name, package)

    monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
    monkeypatch.setattr(builtins, "__import__", spy_import)
    monkeypatch.setattr(importlib, "import_module", spy_import_module)
    return finder


def _initial() -> dict[str, Any]:
    return {p.name: p.initial() for p in PROJECTIONS}


def _decode_one(tally: Tally, spy: ImportSpy, topic: str, payload: bytes) -> bool:
    """Decode one stored row; True when it was rejected (typed)."""
    tally.payloads += 1
    modules = len(sys.modules)
    spy.active = True
    try:
        event = decode_event(topic, payload, position=tally.payloads)
    except DecodeError as exc:
        spy.active = False
        if exc.position != tally.payloads:
            tally.untyped.append(f"{topic!r}: DecodeError without its position")
        tally.typed[type(exc).__name__] += 1
        return True
    except Exception as exc:
        spy.active = False
        tally.untyped.append(f"{topic[:60]!r} {payload[:80]!r}: {type(exc).__name__}: {exc}")
        return False
    finally:
        spy.active = False
        if spy.seen or len(sys.modules) != modules:
            tally.imports.append(f"{topic[:60]!r}: {spy.seen[:3]}")
            spy.seen.clear()
    tally.accepted += 1
    name = topic.rpartition(".v")[0]
    if type(event) is not EVENT_TYPES.get(name):
        tally.untyped.append(f"{topic!r} decoded to {type(event).__name__}")
    states = _initial()
    try:  # an accepted event must fold into every read model (projections are total)
        for p in PROJECTIONS:
            states[p.name] = p.evolve(states[p.name], event)
    except Exception as exc:
        tally.fold_errors.append(f"{topic!r}: {type(exc).__name__}: {exc}")
    return False


def _check_never_partial(tally: Tally, topic: str, payload: bytes, valid: list[ev.Event]) -> None:
    """A rejected row in the middle of the log: the runner keeps the last complete batch."""
    with open_ledger("memory://") as ledger:
        ledger.append("s", valid[:3], expected_version=0)
        ledger._backend.recorder.insert_events(  # the corrupt row, as another writer stored it
            [StoredEvent(originator_id="s", originator_version=4, topic=topic, state=payload)]
        )
        ledger.append("s", valid[3:], expected_version=4)
        runner = ProjectionRunner(ledger, batch_size=2)
        with pytest.raises(DecodeError):
            runner.run_once()
        assert runner.position == 2  # the first batch of two; the second held the bad row
        saved = ledger.load_projection("pool")
        assert saved is not None
        assert saved[0] == 2
        expected, _, _ = replay_states(ledger, upto=2)
        for name, state in expected.items():
            assert encode_state(runner.states[name]) == encode_state(state)
        other = ProjectionRunner(ledger)
        assert other.position == 2  # persisted: resumes there, not half-way into the batch
    tally.runner_checks += 1


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=20,
)


def test_decoder_fuzzing(spy: ImportSpy) -> None:
    tally = Tally()
    started = time.monotonic()
    topics = [f"{n}.v{c.schema_version}" for n, c in EVENT_TYPES.items()]
    filler: list[ev.Event] = [ev.ItemPinned(at=AT, agent_id="a", item_id=f"i{i}") for i in range(5)]

    @settings(
        max_examples=BASE_EXAMPLES,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(event=events(), rnd=st.randoms(use_true_random=False))
    def mutated(event: ev.Event, rnd: random.Random) -> None:
        topic, payload = encode_event(event)
        _decode_one(tally, spy, topic, payload)  # the untouched row decodes
        checked = False
        for _ in range(MUTATIONS_PER_EXAMPLE - 1):
            bad_topic = mutate_topic(topic, rnd)
            bad = mutate(payload, rnd)
            rejected = _decode_one(tally, spy, bad_topic, bad)
            if rejected and not checked:
                _check_never_partial(tally, bad_topic, bad, filler)
                checked = True

    @settings(max_examples=JSON_EXAMPLES, deadline=None)
    @given(
        doc=_json,
        tag=st.sampled_from([*EVENT_TYPES, "os.system", "builtins.eval", "X"]) | st.text(),
        topic=st.sampled_from([*topics, *HOSTILE_TOPICS]) | st.text(max_size=40),
    )
    def generated(doc: Any, tag: str, topic: str) -> None:
        if isinstance(doc, dict):
            doc = {**doc, "type": tag}
        _decode_one(tally, spy, topic, msgspec.json.encode(doc))

    mutated()
    generated()
    elapsed = time.monotonic() - started

    assert tally.untyped == []
    assert tally.imports == []
    assert tally.fold_errors == []
    assert tally.payloads >= MINIMUM_PAYLOADS
    assert tally.runner_checks > 0
    rejected = sum(tally.typed.values())
    kinds = ", ".join(f"{n} {c}" for n, c in sorted(tally.typed.items()))
    record(
        "decoder fuzzing",
        scale=f"{tally.payloads} payloads ({BASE_EXAMPLES} Hypothesis events × "
        f"{MUTATIONS_PER_EXAMPLE} mutations + {JSON_EXAMPLES} generated JSON documents)",
        result=(
            f"0 untyped exceptions ({rejected} typed: {kinds}; {tally.accepted} accepted and "
            f"folded without error); 0 imports; 0 partially applied in "
            f"{tally.runner_checks} runner checks; {elapsed:.1f}s"
        ),
        rerun_cmd=rerun("test_decoder_fuzz.py"),
        payloads=tally.payloads,
        accepted=tally.accepted,
        rejected=dict(tally.typed),
        untyped=len(tally.untyped),
        imports=len(tally.imports),
        runner_checks=tally.runner_checks,
        seconds=round(elapsed, 2),
    )


def _spied_decode(spy: ImportSpy, topic: str, payload: bytes) -> ev.Event:
    spy.active = True
    try:
        return decode_event(topic, payload, position=3)
    finally:
        spy.active = False


@pytest.mark.parametrize("topic", HOSTILE_TOPICS)
def test_hostile_topics_are_typed_errors_and_import_nothing(spy: ImportSpy, topic: str) -> None:
    _, payload = encode_event(ev.ItemPinned(at=AT, agent_id="a", item_id="i"))
    modules = set(sys.modules)
    with pytest.raises(DecodeError) as info:
        _spied_decode(spy, topic, payload)
    assert info.value.position == 3
    assert spy.seen == []
    assert set(sys.modules) == modules
