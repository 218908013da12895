"""record_build over random pools, requests, strategies, watermarks, reserves and verified sets,
for a generation's first build and the build after it (append or rebuild): the recorded delta
rebuilds exactly the final decisions, the hash and counts agree with them, the events come in
their documented order and the expected cached bytes are the common prefix with the previous
prompt's stable part."""

from __future__ import annotations

from datetime import timedelta

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxledger.domain import events as ev
from ctxledger.domain import model
from ctxledger.domain.build_record import (
    BuildRecord,
    final_decisions,
    record_build,
    whole_decisions,
)
from ctxledger.domain.generation_policy import BuildPlan, EmittedContext, plan_build
from ctxledger.domain.model import (
    Decision,
    Generation,
    Item,
    Layer,
    Source,
    apply_decision_delta,
    selection_hash,
)
from ctxledger.domain.prompt import PromptParts
from ctxledger.domain.recall import RecallGroup
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.strategies import STRATEGIES
from ctxledger.domain.tokens import EstimatingCounter
from tests.property.strategies_items import NOW, build_requests, item_pools, pool_items

COUNTER = EstimatingCounter()
NAMES = sorted(STRATEGIES)

watermarks = st.floats(min_value=0.01, max_value=0.9)
reserves = st.integers(min_value=0, max_value=60)
groups = st.none() | st.builds(
    RecallGroup,
    text=st.sampled_from(["Recalled: use UTC", "Recalled: é ü — ✓", ""]),
    memory_ids=st.lists(st.sampled_from(["m1", "m2", "m3"]), max_size=3, unique=True).map(tuple),
    skipped=st.dictionaries(st.sampled_from(["m4", "m5"]), st.sampled_from(["stale"])),
    tokens=st.integers(min_value=0, max_value=50),
    bytes=st.integers(min_value=0, max_value=500),
)


@st.composite
def extra_items(draw: st.DrawFn, max_size: int = 8) -> list[Item]:
    """Items recorded after the first build (ids ``n00``…, never in the first pool)."""
    n = draw(st.integers(min_value=0, max_value=max_size))
    return [draw(pool_items(item_id=f"n{k:02d}")) for k in range(n)]


def pack_request(request: BuildRequest, reserve: int) -> BuildRequest:
    """What the planner is given: the request's budget less the VOLATILE reserve."""
    return msgspec.structs.replace(request, budget=max(1, request.budget - reserve))


def built(rec: BuildRecord) -> ev.ContextPackBuilt:
    last = rec.events[-1]
    assert isinstance(last, ev.ContextPackBuilt)
    return last


def digests_counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids of the decisions the selection hash digests from now on (its unit of work),
    in a list that grows as they are digested (``monkeypatch.undo()`` stops it)."""
    digested: list[str] = []
    real = model._decision_digest

    def counting(d: Decision) -> int:
        digested.append(d.item_id)
        return real(d)

    monkeypatch.setattr(model, "_decision_digest", counting)
    return digested


def common_prefix_len(a: str, b: str) -> int:
    """Bytes the UTF-8 encodings of *a* and *b* share from the start (counted one by one)."""
    n = 0
    for x, y in zip(a.encode("utf-8"), b.encode("utf-8"), strict=False):
        if x != y:
            break
        n += 1
    return n


def check_record(
    rec: BuildRecord,
    plan: BuildPlan,
    *,
    gen: Generation,
    request: BuildRequest,
    reserve: int,
    verified: frozenset[str],
    group: RecallGroup | None,
    previous_prompt: PromptParts | None,
    force_rebuild: str,
) -> dict[str, Decision]:
    """Check one record against its inputs; return the selection the generation now holds."""
    rebuild = plan.kind == "rebuild"
    names = [type(e).__name__ for e in rec.events]
    assert names == [
        *(["GenerationRefreshed"] if rebuild else []),
        *(["RecallRendered"] if group is not None else []),
        "ContextPackBuilt",
    ]
    number = gen.number + 1 if rebuild else gen.number
    if rebuild:
        gr = rec.events[0]
        assert isinstance(gr, ev.GenerationRefreshed)
        assert (gr.kind, gr.from_generation, gr.to_generation) == ("rebuild", gen.number, number)
        assert gr.trigger == ("manual" if force_rebuild else "budget")
        assert gr.reason == plan.reason != ""
        assert gr.budget == request.budget
        assert gr.strategy == request.strategy
        assert gr.carried == tuple(
            k for k, d in plan.result.decisions.items() if d.action != "dropped"
        )
    if group is not None:
        rr = rec.events[-2]
        assert isinstance(rr, ev.RecallRendered)
        assert (rr.memory_ids, rr.skipped, rr.tokens, rr.bytes) == (
            group.memory_ids,
            group.skipped,
            group.tokens,
            group.bytes,
        )
    cpb = built(rec)
    # a rebuild starts a new generation from nothing; otherwise the delta is against the
    # generation's previous pack
    previous = {} if rebuild else gen.decisions
    final = final_decisions(plan, previous, verified)
    assert set(final) == set(plan.result.decisions)
    if plan.kind != "append":  # what record_build takes: the same decisions, in order
        assert list(whole_decisions(plan, verified).items()) == list(final.items())
    assert apply_decision_delta(previous, cpb.decisions, cpb.retired) == final
    assert all(previous.get(d.item_id) != d for d in cpb.decisions)  # only what changed
    assert all(k in previous and k not in final for k in cpb.retired)
    assert cpb.selection_hash == selection_hash(final)
    assert cpb.included_count == sum(d.action != "dropped" for d in final.values())
    assert cpb.budget_used == plan.result.used + reserve == rec.pack.budget_used
    assert cpb.overflow == max(0, plan.result.used + reserve - request.budget)
    assert cpb.budget_limit == request.budget
    assert cpb.reserved == reserve
    assert cpb.generation == rec.generation == rec.pack.generation == number
    assert cpb.prompt_bytes == len(rec.prompt.text.encode("utf-8"))
    expected = 0
    if previous_prompt is not None:
        expected = common_prefix_len(previous_prompt.stable, rec.prompt.text)
    assert cpb.expected_cached_bytes == expected == rec.expected_cached_bytes
    for d in final.values():
        if d.verified:
            assert d.action != "dropped"
            assert d.item_id in verified
    return final


@given(
    pool=item_pools(max_size=20),
    extra=extra_items(),
    request=build_requests(),
    name=st.sampled_from(NAMES),
    watermark=watermarks,
    reserve=reserves,
    data=st.data(),
)
def test_a_build_and_the_next_record_exactly_their_selection(
    *,
    pool: list[Item],
    extra: list[Item],
    request: BuildRequest,
    name: str,
    watermark: float,
    reserve: int,
    data: st.DataObject,
) -> None:
    request = msgspec.structs.replace(request, strategy=name)
    ids = sorted({i.id for i in pool} | {i.id for i in extra})
    verified: frozenset[str] = frozenset()
    if ids:
        verified = frozenset(data.draw(st.lists(st.sampled_from(ids), unique=True)))
    group1, group2 = data.draw(groups), data.draw(groups)
    force = data.draw(st.sampled_from(["", "", "manual"]))
    keep_previous_prompt = data.draw(st.booleans())
    planned = pack_request(request, reserve)

    gen0 = Generation(number=1)
    plan1 = plan_build(planned, pool, None, COUNTER, watermark=watermark)
    assert plan1.kind == "initial"
    rec1 = record_build(
        agent_id="agent-1",
        plan=plan1,
        request=request,
        gen=gen0,
        ctx=None,
        pack_id="p1",
        reserve=reserve,
        verified_ids=verified,
        previous_prompt=None,
        group=group1,
        latest_user_input="",
        force_rebuild="",
    )
    final1 = check_record(
        rec1,
        plan1,
        gen=gen0,
        request=request,
        reserve=reserve,
        verified=verified,
        group=group1,
        previous_prompt=None,
        force_rebuild="",
    )
    cpb1 = built(rec1)
    gen1 = Generation(
        number=1,
        decisions=apply_decision_delta({}, cpb1.decisions, cpb1.retired),
        order=rec1.prompt.order,
        tokens_used=cpb1.budget_used,
        reserved=reserve,
        builds=1,
        # as the generations read model holds it (the next pack's hash is then updated from
        # it), or a ledger's generation with no order-independent hash (hashed whole)
        selection_hash=cpb1.selection_hash if data.draw(st.booleans()) else "",
    )
    assert gen1.decisions == final1
    ctx = EmittedContext(
        generation=1,
        decisions=gen1.decisions,
        emitted={it.id: it for it in plan1.result.items},
        order=gen1.order,
        used=plan1.result.used,
    )

    plan2 = plan_build(
        planned, [*pool, *extra], ctx, COUNTER, watermark=watermark, force_rebuild=force
    )
    previous_prompt = rec1.prompt if keep_previous_prompt else None
    rec2 = record_build(
        agent_id="agent-1",
        plan=plan2,
        request=request,
        gen=gen1,
        ctx=ctx,
        pack_id="p2",
        reserve=reserve,
        verified_ids=verified,
        previous_prompt=previous_prompt,
        group=group2,
        latest_user_input="next?",
        force_rebuild=force,
    )
    check_record(
        rec2,
        plan2,
        gen=gen1,
        request=request,
        reserve=reserve,
        verified=verified,
        group=group2,
        previous_prompt=previous_prompt,
        force_rebuild=force,
    )
    if force:
        assert plan2.kind == "rebuild"
    if plan2.kind == "append":
        # an append keeps every emitted decision as it was and extends the stable prompt
        for k, d in gen1.decisions.items():
            assert final_decisions(plan2, gen1.decisions, verified)[k] is d
        assert rec2.prompt.text.encode("utf-8").startswith(rec1.prompt.stable.encode("utf-8"))
        if previous_prompt is not None:
            assert rec2.expected_cached_bytes == len(rec1.prompt.stable.encode("utf-8"))


def test_a_rebuild_digests_only_the_decisions_it_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rebuild's selection hash comes from the closing generation's: the decisions it
    repeats (here most of 400 items' ``over_budget``) are not digested again, and the hash is
    the whole selection's."""
    pool = [
        Item(
            id=f"i{n:03d}",
            layer=Layer.L2,
            source=Source.WORKER_FINDING,
            content=f"finding {n} of the run",
            token_count=10,
            observed_at=NOW - timedelta(minutes=400 - n),
        )
        for n in range(400)
    ]
    request = BuildRequest(agent_id="agent-1", budget=500, now=NOW, keywords=("run",))
    plan1 = plan_build(request, pool, None, COUNTER)

    def record(plan: BuildPlan, gen: Generation, ctx: EmittedContext | None) -> BuildRecord:
        return record_build(
            agent_id="agent-1",
            plan=plan,
            request=request,
            gen=gen,
            ctx=ctx,
            pack_id=f"p{gen.builds + 1}",
            reserve=0,
            verified_ids=frozenset(),
            previous_prompt=None,
            group=None,
            latest_user_input="",
            force_rebuild="manual" if plan.kind == "rebuild" else "",
        )

    rec1 = record(plan1, Generation(number=1), None)
    decisions1 = apply_decision_delta({}, built(rec1).decisions, ())
    gen1 = Generation(
        number=1,
        decisions=decisions1,
        order=rec1.prompt.order,
        builds=1,
        selection_hash=built(rec1).selection_hash,
    )
    ctx = EmittedContext(
        generation=1,
        decisions=decisions1,
        emitted={it.id: it for it in plan1.result.items},
        order=gen1.order,
        used=plan1.result.used,
    )
    plan2 = plan_build(request, pool, ctx, COUNTER, force_rebuild="manual")
    assert plan2.kind == "rebuild"
    digested = digests_counted(monkeypatch)
    rec2 = record(plan2, gen1, ctx)
    monkeypatch.undo()
    final = apply_decision_delta({}, built(rec2).decisions, built(rec2).retired)
    assert built(rec2).selection_hash == selection_hash(final)
    changed = [k for k, d in final.items() if decisions1.get(k) != d]
    assert 0 < len(changed) < 100  # the watermark drops some of what was included
    assert sorted(digested) == sorted(changed * 2)  # each: the old decision out, the new in
