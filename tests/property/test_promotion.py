"""Finding promotion into a context pool and the recall switch, as pure decisions and folds
(issue 39): for any origin item, promotion keeps its verification (never grants it), makes an
L2 finding of tier 2 or 3 whose id depends on the origin only, and is refused for non-findings
and twice into one pool; the folded recall setting is the last switch's."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxledger.adapters.testing import items
from ctxledger.domain import events as ev
from ctxledger.domain.controls_policy import (
    NOT_FINDINGS,
    decide_promote_finding,
    decide_recall_switch,
    promoted_id,
)
from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.model import Item, Layer, Source
from ctxledger.domain.tiers import priority_tier
from ctxledger.projections.inspector import InspectorState, evolve_inspector
from ctxledger.projections.pool import Pool, evolve_pool

AT = datetime(2026, 3, 1, tzinfo=UTC)


def _now() -> datetime:
    return AT


@given(items(), st.booleans(), st.sampled_from(["w", "p"]))
def test_promotion_keeps_verification_and_makes_an_l2_finding(
    origin: Item, verified: bool, to: str
) -> None:
    origin = msgspec.structs.replace(origin, verified=True) if verified else origin
    if origin.source in NOT_FINDINGS:
        with pytest.raises(InvalidInputError, match="not a finding"):
            decide_promote_finding("w", origin.id, origin, to_agent=to, promoted={}, now=_now)
        return
    recorded, promoted = decide_promote_finding(
        "w", origin.id, origin, to_agent=to, promoted={}, now=_now, by="me"
    )
    assert isinstance(recorded, ev.ItemRecorded)
    assert isinstance(promoted, ev.FindingPromoted)
    item = recorded.item
    assert item.id == promoted.item_id == promoted_id("w", origin.id)
    assert (recorded.agent_id, promoted.agent_id) == (to, to)
    assert (promoted.from_agent, promoted.from_item) == ("w", origin.id)
    assert item.verified is origin.verified is promoted.verified
    assert item.layer is Layer.L2
    assert item.source is (Source.VERIFIED_FACT if origin.verified else Source.WORKER_FINDING)
    assert (item.content, item.files, item.symbols) == (
        origin.content, origin.files, origin.symbols,
    )  # fmt: skip
    assert (item.pinned, item.mandatory, item.failure, item.group) == (False, False, False, "")
    assert priority_tier(item) == (2 if origin.verified else 3)
    # folded: the target pool holds it with its origin; promoting again is refused
    pool = Pool()
    for event in (recorded, promoted):
        pool = evolve_pool(pool, event)
    held = pool.by_agent[to]
    assert held.promoted == {item.id: ("w", origin.id)}
    assert held.current(item.id).verified is origin.verified
    with pytest.raises(InvalidInputError, match="already promoted"):
        decide_promote_finding(
            "w", origin.id, origin, to_agent=to, promoted=held.promoted, now=_now
        )


@given(st.lists(st.booleans(), max_size=8), st.booleans())
def test_the_folded_recall_setting_is_the_last_switch(switches: list[bool], default: bool) -> None:
    state = InspectorState()
    current = default
    appended = 0
    for wanted in switches:
        events = decide_recall_switch(wanted, current, now=_now)
        assert len(events) == (wanted != current)  # a switch to the same value records nothing
        for event in events:
            state = evolve_inspector(state, event)
            appended += 1
        current = wanted
    if appended:
        assert state.recall_enabled is switches[-1]
    else:
        assert state.recall_enabled is None  # never recorded: the engine's default decides
