"""The engine's pure decisions (domain/*_policy.py, domain/build_protocol.py): state in, events
out, the domain error raised before the clock is read."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ctxledger.domain import events as ev
from ctxledger.domain.controls_policy import decide_pin, decide_remove, decide_verify
from ctxledger.domain.erasure_policy import decide_erase
from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.intake_policy import decide_configure, decide_register
from ctxledger.domain.model import AgentIdentity, Item, Layer, Source
from ctxledger.domain.settings import AgentSettings
from ctxledger.domain.turn_policy import decide_turn_succeeded

AT = datetime(2026, 1, 1, tzinfo=UTC)


def never() -> datetime:
    raise AssertionError("the clock was read")


def item(*, source: Source = Source.TOOL_LOG, pinned: bool = False) -> Item:
    return Item(id="i", layer=Layer.L0, source=source, content="x", pinned=pinned)


def test_register_once_and_refuse_another_identity() -> None:
    me = AgentIdentity(agent_id="a", role="r", session_id="s")
    events = decide_register(None, me, AgentSettings(), now=lambda: AT)
    assert [type(e) for e in events] == [ev.AgentRegistered, ev.AgentConfigured]
    assert decide_register(me, me, AgentSettings(), now=never) == []
    other = AgentIdentity(agent_id="a", role="other", session_id="s")
    with pytest.raises(InvalidInputError):
        decide_register(me, other, AgentSettings(), now=never)


def test_configure_decides_nothing_when_nothing_changes() -> None:
    current = AgentSettings()
    assert decide_configure("a", current, {}, now=never) == []
    [configured] = decide_configure("a", current, {"recall": not current.recall}, now=lambda: AT)
    assert isinstance(configured, ev.AgentConfigured)
    assert configured.settings.recall is not current.recall


def test_control_guards_raise_before_the_clock() -> None:
    with pytest.raises(InvalidInputError, match="has no item"):
        decide_pin("a", "i", None, now=never)
    with pytest.raises(InvalidInputError, match="pinned or mandatory"):
        decide_remove("a", "i", item(pinned=True), now=never, reason="r")
    with pytest.raises(InvalidInputError, match="recalled memory"):
        decide_verify("a", "i", item(source=Source.RECALLED_MEMORY), now=never)
    [removed] = decide_remove("a", "i", item(), now=lambda: AT, reason="r")
    assert removed == ev.ItemRemoved(at=AT, agent_id="a", item_id="i", reason="r")


def test_erase_removes_what_is_still_in_the_pool_and_records_last() -> None:
    events = decide_erase("a", "", pool_items=("x", "y"), removed={"y"}, at=AT, reason="r")
    assert [type(e) for e in events] == [ev.ItemRemoved, ev.ContentErased]
    assert isinstance(events[-1], ev.ContentErased)
    assert events[-1].items == ("x", "y")


def test_turn_succeeded_only_ends_a_refresh_count() -> None:
    assert decide_turn_succeeded("a", refresh_streak=0, generation=1, now=never) == []
    [done] = decide_turn_succeeded("a", refresh_streak=2, generation=3, now=lambda: AT)
    assert done == ev.TurnSucceeded(at=AT, agent_id="a", generation=3)
