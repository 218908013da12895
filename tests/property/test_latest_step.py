"""The latest-step policy and the hard budget, for every strategy: the newest step's group
and the last failures are in every pack (clipped to fit if need be) and the pack is within
its budget unless forced (pinned/mandatory) content alone exceeds it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ctxledger.domain.clipping import CLIP_REASON
from ctxledger.domain.generation_policy import RECENT_FAILURES, keep_ids, plan_build
from ctxledger.domain.model import Item, Layer, Source
from ctxledger.domain.packing import KEPT_CLIPPED
from ctxledger.domain.request import BuildRequest, Scope
from ctxledger.domain.strategies import BASELINES, strategy_names
from ctxledger.domain.tokens import EstimatingCounter
from tests.property.strategies_items import build_requests, item_pools

COUNTER = EstimatingCounter()
ALWAYS_KEPT = (Source.STEERING_NOTE, Source.EVENT_HISTORY)
MIN_ROOM = 24 + 8  # include_kept's least room per member (room + render allowance)


def tokens_of(item: Item) -> int:
    return item.token_count if item.token_count > 0 else COUNTER.count(item.content)


def forced(item: Item, strategy: str) -> bool:
    own = item.pinned or item.mandatory or item.source is Source.ROLE_INSTRUCTION
    return own or (strategy == "layered" and item.source in ALWAYS_KEPT)


def forced_group_ids(pool: list[Item], strategy: str) -> set[str]:
    groups = {i.group for i in pool if i.group and forced(i, strategy)}
    return {i.id for i in pool if forced(i, strategy) or (i.group and i.group in groups)}


def test_keep_ids_is_the_newest_group_then_the_last_failures() -> None:
    def item(iid: str, *, group: str = "", failure: bool = False) -> Item:
        return Item(id=iid, layer=Layer.L0, source=Source.TOOL_LOG, content=iid, group=group,
                    failure=failure)  # fmt: skip

    pool = [
        item("f1", failure=True), item("a", group="s1"), item("f2", failure=True),
        item("f3", failure=True), item("f4", failure=True), item("x", group="s2"),
        item("y", group="s2", failure=True),
    ]  # fmt: skip
    # the newest step is group s2 (x, y); then the three newest other failures, newest first
    assert keep_ids(pool) == ("x", "y", "f4", "f3", "f2")
    assert keep_ids([item("solo")]) == ("solo",)
    assert keep_ids([]) == ()
    assert RECENT_FAILURES == 3


ENGINE_STRATEGIES = [n for n in strategy_names() if n not in BASELINES]
"""The baselines are the peers' rules: no latest-step policy (domain.strategies.baselines)."""


@given(
    item_pools(max_size=25),
    build_requests(),
    st.sampled_from(ENGINE_STRATEGIES),
    st.lists(st.sampled_from(["line of tool output", "E   AssertionError", "x" * 40]), min_size=1,
             max_size=400).map("\n".join),
)  # fmt: skip
def test_the_newest_step_is_kept_and_the_budget_holds(
    pool: list[Item], request: BuildRequest, strategy: str, latest_text: str
) -> None:
    # the newest step: a (possibly huge) tool output recorded last, not pinned
    latest = Item(
        id="latest", layer=Layer.L0, source=Source.TOOL_LOG, content=latest_text, group="zz-step"
    )
    action = Item(
        id="latest-action",
        layer=Layer.L0,
        source=Source.CONVERSATION,
        content="$ run",
        group="zz-step",
    )
    candidates = [*[i for i in pool if i.group != "zz-step"], action, latest]
    req = BuildRequest(
        agent_id="a",
        budget=request.budget,
        now=request.now,
        strategy=strategy,
        task=request.task,
        files=request.files,
        scope=Scope(clip_above_tokens=request.scope.clip_above_tokens),
        latest_step=True,
    )
    plan = plan_build(req, candidates, None, COUNTER)
    res = plan.result
    forced_ids = forced_group_ids(candidates, strategy)
    forced_total = sum(tokens_of(i) for i in candidates if i.id in forced_ids)
    # the budget holds unless forced content alone exceeds it
    assert res.used <= max(res.budget, forced_total)
    if res.used > res.budget:
        assert {i.id for i in res.items} == forced_ids
    # the newest step's group is in (whole or clipped) whenever forced content leaves room
    if res.budget - forced_total >= 2 * MIN_ROOM and "zz-step" not in {
        i.group for i in candidates if i.id in forced_ids
    }:
        for iid in ("latest", "latest-action"):
            d = res.decisions[iid]
            assert d.action in ("included", "clipped", "compressed"), d
            if d.action != "included":
                assert d.reason in (KEPT_CLIPPED, CLIP_REASON), d
