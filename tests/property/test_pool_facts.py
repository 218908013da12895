"""A pool version that extends a remembered one (items recorded since) extends its facts
(``PoolFacts.extended``) instead of deriving them over the whole pool again: held equal here
to the facts derived from scratch, field by field, and by every strategy's selection."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxledger.domain import pool_facts as pf
from ctxledger.domain import retrieval
from ctxledger.domain.memo import clear_caches
from ctxledger.domain.model import Decision, Item, Layer, Source
from ctxledger.domain.pool_facts import PoolFacts, pool_facts
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.retrieval import retrieve
from ctxledger.domain.strategies import STRATEGIES, get_strategy
from ctxledger.domain.tokens import EstimatingCounter
from tests.property.strategies_items import STAGES, build_requests, pool_items, staged_pools

COUNTER = EstimatingCounter()
_EAGER = (
    "items", "ids", "tier", "ts", "forced", "group", "layer", "layer_value", "contents",
    "index", "unique", "plain", "plain_with_raw", "distinct_contents", "groups",
    "group_tier", "group_forced", "group_raw", "versions", "staged",
)  # fmt: skip


@st.composite
def recorded_since(draw: st.DrawFn) -> list[Item]:
    """Items recorded after the first pool: new ids, and now and then an id, a group or a
    ``source_id`` the pool already has (a repeated id, a group's next member, a version);
    steering notes scoped to stages."""
    n = draw(st.integers(min_value=1, max_value=6))
    out = []
    for k in range(n):
        item = draw(pool_items(item_id=draw(st.sampled_from([f"n{k:02d}", "i00", "i01"]))))
        if item.source is Source.STEERING_NOTE or draw(st.integers(0, 3)) == 0:
            stage = draw(st.sampled_from(STAGES))
            item = msgspec.structs.replace(item, source=Source.STEERING_NOTE, stage=stage)
        out.append(item)
    return out


base_pools = staged_pools(max_size=20).map(lambda case: case[0])


def _same_facts(a: PoolFacts, b: PoolFacts) -> None:
    # the decisions carried over by position are each still their position's item's
    for (k, t), d in a._included.items():
        assert d == Decision(item_id=a.ids[k], action="included", tokens_before=t, tokens_after=t)
    for made in a._dropped_as.values():
        assert len(made) == len(a.items)
        assert all(d is None or d.item_id == a.ids[k] for k, d in enumerate(made))
    for name in _EAGER:
        x, y = getattr(a, name), getattr(b, name)
        assert x == y, name
        if isinstance(x, dict):
            assert list(x) == list(y), f"{name}: key order"
    assert a.tokens(COUNTER) == b.tokens(COUNTER)
    assert a.over_budget(COUNTER) == b.over_budget(COUNTER)
    assert a.chronological() == b.chronological()


@given(pool=base_pools, extra=recorded_since(), request=build_requests())
def test_extended_facts_equal_the_facts_derived_from_scratch(
    pool: list[Item], extra: list[Item], request: BuildRequest
) -> None:
    clear_caches()
    base = pool_facts(pool)
    for name in sorted(STRATEGIES):  # fill the base's lazy facts the extension may carry
        get_strategy(name).select(
            msgspec.structs.replace(request, strategy=name), retrieve(request, pool), COUNTER
        )
    grown = [*pool, *extra]
    extended = pool_facts(grown)
    if pool:
        assert pf._extends(tuple(map(id, grown))) is base  # it did extend
        # a pool whose first item is another object extends nothing
        other = [msgspec.structs.replace(pool[0]), *pool[1:], *extra]
        assert pf._extends(tuple(map(id, other))) is None
    _same_facts(extended, PoolFacts(grown))


@given(
    pool=base_pools,
    extra=recorded_since(),
    request=build_requests(),
    name=st.sampled_from(sorted(STRATEGIES)),
)
def test_a_selection_over_extended_facts_is_the_one_from_scratch(
    pool: list[Item], extra: list[Item], request: BuildRequest, name: str
) -> None:
    request = msgspec.structs.replace(request, strategy=name)
    strategy = get_strategy(name)
    grown = [*pool, *extra]
    clear_caches()
    fresh = msgspec.json.encode(strategy.select(request, retrieve(request, grown), COUNTER))
    clear_caches()
    strategy.select(request, retrieve(request, pool), COUNTER)  # the base version, warm
    extended = msgspec.json.encode(strategy.select(request, retrieve(request, grown), COUNTER))
    assert extended == fresh


def test_a_version_that_extends_another_scores_only_the_items_recorded_since(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its time-independent score parts are the known version's followed by the new
    items' (``partial_prefix``): only those are scored, and the scores are the same."""
    at = datetime(2025, 3, 1, tzinfo=UTC)
    pool = [
        Item(
            id=f"i{k:02d}", content=("auth ", "retry ", "cache auth ")[k % 3] * (k % 5 + 1),
            layer=Layer.L2, source=Source.TOOL_LOG, observed_at=at + timedelta(minutes=k),
            phase=("fix", "plan", "")[k % 3],
        )
        for k in range(40)
    ]  # fmt: skip
    grown = [
        *pool,
        *(
            msgspec.structs.replace(
                i,
                id=f"n{k}",
                content=f"auth cache {k}",
                observed_at=at + timedelta(hours=1, minutes=k),
            )
            for k, i in enumerate(pool[:3])
        ),
    ]
    for role in ("primary", "observer"):  # (a role with weights per source, and one without)
        request = BuildRequest(
            agent_id="a", budget=300, now=at + timedelta(hours=2), role=role, phase="fix",
            keywords=("auth", "cache"),
        )  # fmt: skip
        clear_caches()
        fresh = retrieve(request, grown)
        expected = (list(fresh.order), list(fresh.scores))
        clear_caches()
        retrieve(request, pool)
        scored: list[int] = []
        entries = retrieval._partial_entries

        def spy(req: BuildRequest, items: list[Item], seen: list[int] = scored) -> list[Any]:
            seen.append(len(items))
            return entries(req, items)  # noqa: B023  (called before the loop moves on)

        monkeypatch.setattr(retrieval, "_partial_entries", spy)
        ranked = retrieve(request, grown)
        monkeypatch.undo()
        assert scored == [3]
        assert (list(ranked.order), list(ranked.scores)) == expected
