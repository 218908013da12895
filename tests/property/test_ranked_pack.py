"""The packer over positions (``ranked_pack``) decides exactly what the general packer does.

``packing.pack`` given a list of scored items is the general packer (the specification);
given the :class:`Ranked` that ``retrieve`` returns it runs ``ranked_pack.pack_ranked`` on the
pool's arrays. Both must record the same decisions in the same order and select the same
items, byte for byte, for every option a strategy passes and every request.
"""

from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from ctxledger.domain.model import Item, Layer, Source
from ctxledger.domain.packing import (
    OMITTED_BY_STRATEGY,
    OTHER_PHASE,
    Candidate,
    PackResult,
    pack,
)
from ctxledger.domain.ranked_pack import pack_ranked
from ctxledger.domain.request import BuildRequest, Scope
from ctxledger.domain.retrieval import Ranked, retrieve
from ctxledger.domain.strategies import STRATEGIES, get_strategy
from ctxledger.domain.tokens import EstimatingCounter
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
    general = strategy.select(request, list(ranked), COUNTER)
    assert _encoded(fast) == _encoded(general)
    assert list(fast.decisions) == list(general.decisions)


def _omit_l3(c: Candidate) -> str | None:
    return OMITTED_BY_STRATEGY if c.item.layer is Layer.L3 else None


def _omit_two_reasons(c: Candidate) -> str | None:
    """Members of one group may give different reasons: the first in ranked order counts."""
    layer = c.item.layer
    return OMITTED_BY_STRATEGY if layer is Layer.L3 else OTHER_PHASE if layer is Layer.L2 else None


@given(
    cases(),
    st.fixed_dictionaries(
        {
            "budget": st.one_of(st.none(), st.integers(0, 2000)),
            "omit": st.sampled_from([None, _omit_l3, _omit_two_reasons]),
            "omit_key": st.sampled_from([None, "key"]),  # verdicts memoised per pool version
            "chronological": st.booleans(),
            "supersede": st.sampled_from(
                [frozenset(), frozenset({Source.ARTIFACT}), frozenset(Source)]
            ),
            "dedupe": st.booleans(),
            "compress": st.booleans(),
            "stop_at_first_miss": st.booleans(),
            "raw_history": st.booleans(),
        }
    ),
)
def test_every_packing_option_decides_the_same_over_positions(
    case: tuple[list[Item], BuildRequest], options: dict[str, object]
) -> None:
    pool, request = case
    request = msgspec.structs.replace(request, scope=Scope())
    ranked = retrieve(request, pool)
    assert type(ranked) is Ranked
    fast = pack_ranked(request, ranked, COUNTER, strategy_name="s", **options)  # type: ignore[arg-type]
    again = pack_ranked(request, ranked, COUNTER, strategy_name="s", **options)  # type: ignore[arg-type]
    del options["omit_key"]  # the general packer tests every candidate each time
    general = pack(request, list(ranked), COUNTER, strategy_name="s", **options)  # type: ignore[arg-type]
    ids = [it.id for it in pool]
    other_stage = any(
        it.source is Source.STEERING_NOTE and it.stage not in ("", request.stage_id) for it in pool
    )
    if len(set(ids)) < len(ids) or other_stage:
        assert fast is None  # declined: the general packer decides
        return
    assert fast is not None
    assert again is not None
    assert _encoded(fast) == _encoded(general) == _encoded(again)
    assert list(fast.decisions) == list(general.decisions)


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
    assert pack_ranked(
        request, ranked, COUNTER, strategy_name="variable", budget=None, omit=None,
        chronological=False, supersede=frozenset({Source.ARTIFACT}), dedupe=True, compress=True,
        stop_at_first_miss=False, raw_history=False,
    ) is not None  # fmt: skip


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
        fast = pack_ranked(request, ranked, COUNTER, strategy_name="s", omit_key="k", **options)  # type: ignore[arg-type]
        general = pack(request, list(ranked), COUNTER, strategy_name="s", **options)  # type: ignore[arg-type]
        assert fast is not None
        want = OMITTED_BY_STRATEGY if first == "a" else OTHER_PHASE
        assert {d.reason for d in fast.decisions.values()} == {want}
        assert _encoded(fast) == _encoded(general)
