"""Manual controls: the tagged union's JSON form and the one dispatch to the engine."""

from __future__ import annotations

from typing import Any, cast

import msgspec
import pytest

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.clock import SteppingClock
from ctxledger.adapters.engine import ContextEngine, EngineSettings
from ctxledger.adapters.engine.manual_controls import (
    Control,
    ControlOutcome,
    Pin,
    Promote,
    Rebuild,
    Refresh,
    Remove,
    Unpin,
    Verify,
    apply_control,
    decode_control,
)
from ctxledger.adapters.ledger import open_ledger
from ctxledger.domain import events as ev
from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.model import AgentIdentity, Layer, Source

EVERY_CONTROL: tuple[Control, ...] = (
    Pin(agent_id="a", item_id="it_1", by="cli"),
    Unpin(agent_id="a", item_id="it_1"),
    Remove(agent_id="a", item_id="it_2", reason="stale"),
    Verify(agent_id="a", item_id="it_3", by="me", evidence="test passed"),
    Promote(agent_id="a", item_id="it_4"),
    Refresh(agent_id="a"),
    Rebuild(agent_id="a", reason="too big"),
)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ('{"type": "Pin", "agent_id": "a", "item_id": "it_1"}', Pin(agent_id="a", item_id="it_1")),
        (
            '{"type": "Verify", "agent_id": "a", "item_id": "it_3", "evidence": "ok"}',
            Verify(agent_id="a", item_id="it_3", evidence="ok"),
        ),
        ('{"type": "Refresh", "agent_id": "a"}', Refresh(agent_id="a", reason="manual")),
        (
            '{"type": "Remove", "agent_id": "a", "item_id": "x", "reason": "r"}',
            Remove(agent_id="a", item_id="x", reason="r"),
        ),
    ],
)
def test_a_json_control_decodes_to_its_struct(data: str, expected: Control) -> None:
    decoded = decode_control(data)
    assert type(decoded) is type(expected)
    assert decoded == expected


@pytest.mark.parametrize("control", EVERY_CONTROL, ids=lambda c: type(c).__name__)
def test_every_control_round_trips_with_its_class_name_as_tag(control: Control) -> None:
    data = msgspec.json.encode(control)
    assert msgspec.json.decode(data)["type"] == type(control).__name__
    assert decode_control(data) == control


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ('{"type": "Delete", "agent_id": "a", "item_id": "x"}', "Invalid value 'Delete'"),
        ('{"agent_id": "a", "item_id": "x"}', "missing required field `type`"),
        ('{"type": "Pin", "agent_id": "a"}', "missing required field `item_id`"),
        ('{"type": "Refresh", "agent_id": ""}', "length >= 1 - at `$.agent_id`"),
        ('{"type": "Pin", "agent_id": "a", "item_id": 3}', "Expected `str`, got `int`"),
        ('{"type": "Pin"', "truncated"),
    ],
)
def test_a_bad_control_is_an_invalid_input_error(data: str, problem: str) -> None:
    with pytest.raises(InvalidInputError, match=r"^invalid control: ") as caught:
        decode_control(data)
    assert problem in str(caught.value)


class RecordingEngine:
    """Stands in for the engine: records each call and answers like it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args, kwargs))
            if name == "promote":
                return "mem_1"
            if name in {"refresh", "rebuild"}:
                return msgspec.structs.replace(_BUILT, message=f"{name}d")
            return None

        return call


class _Built(msgspec.Struct, frozen=True):
    generation: int
    message: str


_BUILT = _Built(generation=7, message="")


@pytest.mark.parametrize(
    ("control", "call", "outcome"),
    [
        (EVERY_CONTROL[0], ("pin", ("a", "it_1"), {"by": "cli"}), ControlOutcome()),
        (EVERY_CONTROL[1], ("unpin", ("a", "it_1"), {"by": ""}), ControlOutcome()),
        (EVERY_CONTROL[2], ("remove", ("a", "it_2"), {"reason": "stale"}), ControlOutcome()),
        (
            EVERY_CONTROL[3],
            ("verify_finding", ("a", "it_3"), {"by": "me", "evidence": "test passed"}),
            ControlOutcome(),
        ),
        (EVERY_CONTROL[4], ("promote", ("a", "it_4"), {}), ControlOutcome(memory_id="mem_1")),
        (
            EVERY_CONTROL[5],
            ("refresh", ("a",), {"reason": "manual", "trigger": "manual"}),
            ControlOutcome(generation=7, message="refreshd"),
        ),
        (
            EVERY_CONTROL[6],
            ("rebuild", ("a",), {"reason": "too big"}),
            ControlOutcome(generation=7, message="rebuildd"),
        ),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Control) else "",
)
def test_apply_control_calls_exactly_one_engine_method(
    control: Control, call: tuple[str, tuple[Any, ...], dict[str, Any]], outcome: ControlOutcome
) -> None:
    fake = RecordingEngine()
    assert apply_control(cast(ContextEngine, fake), control) == outcome
    assert fake.calls == [call]


def test_apply_control_appends_through_a_real_engine() -> None:
    e = open_engine(
        open_ledger("memory://"), clock=SteppingClock(), settings=EngineSettings(session_id="s")
    )
    e.register_agent(AgentIdentity(agent_id="a", role="primary", task="fix auth", budget=2000))
    item = e.record("a", "auth.py: the timeout is 5s", layer=Layer.L3, source=Source.WORKER_FINDING)
    e.build("a")
    before = e.ledger.max_position()

    pinned = apply_control(
        e, decode_control(f'{{"type":"Pin","agent_id":"a","item_id":"{item.id}"}}')
    )
    assert pinned == ControlOutcome()
    assert e.pool("a").items[item.id].pinned is True
    events = [r.event for r in e.ledger.read_all(after=before)]
    assert [type(x) for x in events] == [ev.ItemPinned]

    rebuilt = apply_control(e, Rebuild(agent_id="a", reason="by test"))
    assert rebuilt.generation == 2 == e.agent("a").current.number
    assert rebuilt.message is not None
    assert rebuilt.message.startswith("Context rebuilt · Generation 1 → 2")
    assert rebuilt.memory_id is None

    with pytest.raises(InvalidInputError, match="has no item"):
        apply_control(e, Unpin(agent_id="a", item_id="it_missing"))
