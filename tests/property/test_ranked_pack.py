"""The packer over positions (``ranked_pack``) decides exactly what the general packer does.

``tests/oracles/packing_spec.pack`` over candidate objects is the general packer (the
specification); the product's ``ranked_pack.pack`` works on the pool's arrays, given the
:class:`Ranked` that ``retrieve`` returns or a list of scored items. Both must record the
same decisions in the same order and select the same items, byte for byte, for every option
a strategy passes and every request (scopes that exclude and clip, steering notes of other
stages, repeated ids).
"""

from __future__ import annotations

from unittest.mock import patch

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxledger.domain import filling, ranked_pack
from ctxledger.domain.model import Item, Layer, Source
from ctxledger.domain.packing import (
    EXCLUDED_BY_SCOPE,
    OMITTED_BY_STRATEGY,
    OTHER_PHASE,
    Candidate,
    PackResult,
)
from ctxledger.domain.ranked_pack import pack
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.retrieval import Ranked, retrieve
from ctxledger.domain.strategies import STRATEGIES, get_strategy
from ctxledger.domain.tokens import EstimatingCounter
from tests.oracles import packing_spec
from tests.property.strategies_items import NOW, build_requests, staged_pools

COUNTER = EstimatingCounter()


def _encoded(res: PackResult) -> bytes:
    return msgspec.json.encode(res)


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[Item], BuildRequest]:
    """A pool (steering notes scoped to stages; now and then a repeated id) and a request
    keeping some of its ids (repeats and unknown ids included) for some stage."""
    pool, keep, stage = draw(staged_pools())
    request = draw(build_requests())
    return pool, msgspec.structs.replace(request, keep_ids=keep, stage_id=stage)


@given(cases(), st.sampled_from(sorted(STRATEGIES)))
def test_every_strategy_decides_the_same_over_ranked_and_listed_candidates(
    case: tuple[list[Item], BuildRequest], name: str
) -> None:
    pool, request = case
    request = msgspec.structs.replace(request, strategy=name)
    ranked = retrieve(request, pool)
    strategy = get_strategy(name)
    fast = strategy.select(request, ranked, COUNTER)
    listed = strategy.select(request, list(ranked), COUNTER)
    assert _encoded(fast) == _encoded(listed)
    assert list(fast.decisions) == list(listed.decisions)


def _omit_l3(c: Candidate) -> str | None:
    return OMITTED_BY_STRATEGY if c.item.layer is Layer.L3 else None


def _omit_as_scope(c: Candidate) -> str | None:
    """A strategy's reason may be the scope's, which truncates no layer."""
    return EXCLUDED_BY_SCOPE if c.item.layer is Layer.L0 else _omit_l3(c)


def _omit_two_reasons(c: Candidate) -> str | None:
    """Members of one group may give different reasons: the first in ranked order counts."""
    layer = c.item.layer
    return OMITTED_BY_STRATEGY if layer is Layer.L3 else OTHER_PHASE if layer is Layer.L2 else None


_OPTIONS = {
    "budget": st.one_of(st.none(), st.integers(0, 2000)),
    "omit": st.sampled_from([None, _omit_l3, _omit_two_reasons, _omit_as_scope]),
    "omit_key": st.sampled_from([None, "key"]),  # verdicts memoised per pool version
    "chronological": st.booleans(),
    "supersede": st.sampled_from([frozenset(), frozenset({Source.ARTIFACT}), frozenset(Source)]),
    "dedupe": st.booleans(),
    "compress": st.booleans(),
    "stop_at_first_miss": st.booleans(),
    "raw_history": st.booleans(),
}


def _decides_the_same(pool: list[Item], request: BuildRequest, options: dict[str, object]) -> None:
    ranked = retrieve(request, pool)
    assert type(ranked) is Ranked
    fast = pack(request, ranked, COUNTER, strategy_name="s", **options)  # type: ignore[arg-type]
    again = pack(request, ranked, COUNTER, strategy_name="s", **options)  # type: ignore[arg-type]
    listed = pack(request, list(ranked), COUNTER, strategy_name="s", **options)  # type: ignore[arg-type]
    del options["omit_key"]  # the general packer tests every candidate each time
    general = packing_spec.pack(request, list(ranked), COUNTER, strategy_name="s", **options)  # type: ignore[arg-type]
    assert _encoded(fast) == _encoded(general) == _encoded(again) == _encoded(listed)
    assert list(fast.decisions) == list(general.decisions) == list(listed.decisions)


@given(cases(), st.fixed_dictionaries(_OPTIONS))
def test_every_packing_option_decides_the_same_over_positions(
    case: tuple[list[Item], BuildRequest], options: dict[str, object]
) -> None:
    pool, request = case
    _decides_the_same(pool, request, options)


@st.composite
def small_room_cases(draw: st.DrawFn) -> tuple[list[Item], BuildRequest]:
    """Small distinct texts (0-48 tokens; empty ones count 0) among the usual ones (long
    logs that compress, repeated texts) and small budgets: the fill reaches a room below
    what compression needs with units left that may still fit."""
    pool, request = draw(cases())
    pool = [
        it if n is None else msgspec.structs.replace(it, content="" if n < 0 else f"{it.id} " + "w" * n)
        for it, n in zip(pool, draw(st.lists(st.one_of(st.integers(-3, 190), st.none()),
                                             min_size=len(pool), max_size=len(pool))), strict=True)
    ]  # fmt: skip
    return pool, request


@given(
    small_room_cases(),
    st.fixed_dictionaries({**_OPTIONS, "budget": st.one_of(st.none(), st.integers(0, 300))}),
)
def test_small_rooms_decide_the_same_over_positions(
    case: tuple[list[Item], BuildRequest], options: dict[str, object]
) -> None:
    pool, request = case
    _decides_the_same(pool, request, options)


def _tool_logs(sizes: dict[str, tuple[int | str, int]], budget: int) -> tuple[BuildRequest, Ranked]:
    """A ranked pool of tool logs of the given ``{id: (tokens or text, layer)}`` in that
    order (ids starting ``g-`` form a group); a one-line text of that many tokens."""
    pool = [
        Item(
            id=iid, layer=Layer(layer), source=Source.TOOL_LOG,
            group="g" if iid[:2] == "g-" else "",
            content=n if isinstance(n, str) else (iid + "." * (4 * n))[: 4 * n],
            relevance=1.0 - k / 20,
        )
        for k, (iid, (n, layer)) in enumerate(sizes.items())
    ]  # fmt: skip
    request = BuildRequest(agent_id="a", budget=budget, now=NOW)
    ranked = retrieve(request, pool)
    assert [s.item.id for s in ranked] == list(sizes)
    return request, ranked


_PLAIN: dict[str, object] = {
    "budget": None, "omit": None, "chronological": False, "supersede": frozenset(),
    "dedupe": False, "compress": True, "stop_at_first_miss": False, "raw_history": False,
}  # fmt: skip


def _both(request: BuildRequest, ranked: Ranked) -> PackResult:
    """``pack`` with ``_PLAIN`` options, checked against the general packer."""
    fast = pack(request, ranked, COUNTER, strategy_name="s", omit_key=None, **_PLAIN)  # type: ignore[arg-type]
    general = packing_spec.pack(request, list(ranked), COUNTER, strategy_name="s", **_PLAIN)  # type: ignore[arg-type]
    assert _encoded(fast) == _encoded(general)
    return fast


def test_a_small_room_is_filled_with_what_still_fits_in_ranked_order() -> None:
    """Past a room too small to compress into, later units that fit are still taken (an
    empty text too, until the room is gone), a group only whole, and every other member is
    dropped ``over_budget`` in order (``filling.fill_small_room``)."""
    sizes: dict[str, tuple[int | str, int]] = {
        "big": (390, 1), "wide": (200, 2), "g-a": (4, 2), "g-b": (3, 2), "small": (8, 1),
        "tiny": (2, 0), "mid": (30, 2), "last": (1, 0), "none": (0, 1),
    }  # fmt: skip
    request, ranked = _tool_logs(sizes, 400)
    with patch.object(ranked_pack, "fill_small_room", wraps=filling.fill_small_room) as spy:
        fast = _both(request, ranked)
    assert spy.call_count == 1  # room 10 after "big": below the 16 compression needs
    assert list(fast.decisions) == list(sizes)
    taken = [iid for iid, d in fast.decisions.items() if d.action == "included"]
    assert taken == ["big", "g-a", "g-b", "tiny", "last"]  # 390 + 7 + 2 + 1: no room for "none"
    assert fast.used == 400
    dropped = [d.reason for iid, d in fast.decisions.items() if iid not in taken]
    assert dropped == ["over_budget"] * 4
    assert fast.metadata.layers_truncated == (Layer.L1, Layer.L2)  # not L0: all taken


@pytest.mark.parametrize(
    ("sizes", "taken", "truncated"),
    [
        # a unit exactly the room left after "big" is taken
        ({"big": (390, 1), "wide": (200, 1), "exact": (10, 2)}, ["big", "exact"], (Layer.L1,)),
        # the budget full: the tail at once, every member of a group counted for its layer
        ({"big": (400, 2), "g-a": (5, 2), "g-b": (5, 0), "more": (3, 2)}, ["big"],
         (Layer.L0, Layer.L2)),
        # a room of 40 still takes a log compressed from 75 tokens to 27 + its block header
        # (its layer truncated)
        ({"big": (360, 1), "log": ("k\n" * 150, 2)}, ["big"], (Layer.L2,)),
    ],
)  # fmt: skip
def test_the_rest_of_the_order_is_decided_at_once(
    sizes: dict[str, tuple[int | str, int]], taken: list[str], truncated: tuple[Layer, ...]
) -> None:
    fast = _both(*_tool_logs(sizes, 400))
    assert [iid for iid, d in fast.decisions.items() if d.action == "included"] == taken
    compressed = [iid for iid, d in fast.decisions.items() if d.action == "compressed"]
    assert compressed == [iid for iid in sizes if iid == "log"]
    assert fast.metadata.layers_truncated == truncated


def test_a_large_pool_takes_the_ranked_path_and_matches() -> None:
    pool = [
        Item(
            id=f"i{k:04d}",
            layer=Layer(k % 5),
            source=(Source.ARTIFACT, Source.TOOL_LOG, Source.CONVERSATION)[k % 3],
            content=f"line {k % 97}\n" * (1 + k % 40),
            source_id=f"a{k % 7}" if k % 3 == 0 else "",
            group=f"g{k // 2}" if k % 5 == 1 else "",
            pinned=k % 101 == 0,
        )
        for k in range(600)
    ]
    request = BuildRequest(agent_id="a", budget=3000, now=NOW, keep_ids=("i0599", "i0001"))
    ranked = retrieve(request, pool)
    for name in ("variable", "full_history", "summary", "aggressive_refresh", "role_optimized"):
        req = msgspec.structs.replace(request, strategy=name)
        fast = get_strategy(name).select(req, ranked, COUNTER)
        general = get_strategy(name).select(req, list(ranked), COUNTER)
        assert _encoded(fast) == _encoded(general), name
    spec = packing_spec.pack(request, list(ranked), COUNTER, strategy_name="variable")
    assert _encoded(pack(request, ranked, COUNTER, strategy_name="variable")) == _encoded(spec)


def test_a_group_is_omitted_with_the_reason_of_its_first_member_in_ranked_order() -> None:
    for relevant in ("a", "b"):  # either member ranked first
        pool = [
            Item(
                id=iid, layer=layer, source=Source.TOOL_LOG, content=iid, group="g",
                relevance=1.0 if iid == relevant else 0.0,
            )
            for iid, layer in (("a", Layer.L3), ("b", Layer.L2))
        ]  # fmt: skip
        request = BuildRequest(agent_id="a", budget=100, now=NOW)
        ranked = retrieve(request, pool)
        first = ranked[0].item.id
        assert first == relevant
        options: dict[str, object] = {
            "budget": None, "omit": _omit_two_reasons, "chronological": False,
            "supersede": frozenset(), "dedupe": True, "compress": True,
            "stop_at_first_miss": False, "raw_history": False,
        }  # fmt: skip
        fast = pack(request, ranked, COUNTER, strategy_name="s", omit_key="k", **options)  # type: ignore[arg-type]
        general = packing_spec.pack(request, list(ranked), COUNTER, strategy_name="s", **options)  # type: ignore[arg-type]
        want = OMITTED_BY_STRATEGY if first == "a" else OTHER_PHASE
        assert {d.reason for d in fast.decisions.values()} == {want}
        assert _encoded(fast) == _encoded(general)
