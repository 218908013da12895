"""The append path in O(new items) equals the general path, over random pools and requests.

An append records only its own decisions (``append_decisions``), updates the selection hash
from the delta (``updated_selection_hash``) and extends the generation's previous prompt
(``compose_append``) instead of re-deciding, re-hashing and re-rendering everything. Each is
held equal here to the from-scratch functions that stay the specification: ``final_decisions``
+ ``decision_delta``, ``selection_hash`` over the whole selection, and ``compose`` of every
item. (The engine's memo of the previous prompt is held equal to the prompt re-derived from
the log by an invariant of tests/property/test_restart_transparency.py.)"""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from ctxledger.domain.build_record import (
    BuildRecord,
    append_decisions,
    final_decisions,
    record_build,
)
from ctxledger.domain.generation_policy import BuildPlan, EmittedContext, new_candidates, plan_build
from ctxledger.domain.model import (
    SELECTION_HASH_PREFIX,
    Decision,
    Generation,
    Item,
    Source,
    apply_decision_delta,
    decision_delta,
    legacy_selection_hash,
    rehashed_selection,
    selection_hash,
    selection_matches,
    updated_selection_hash,
)
from ctxledger.domain.prompt import PromptParts, Segment, compose, compose_append
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.strategies import STRATEGIES
from ctxledger.projections.build_view import previous_prompt
from tests.property.strategies_items import build_requests, item_pools
from tests.property.test_build_record import (
    COUNTER,
    built,
    digests_counted,
    extra_items,
    pack_request,
)

IDS = [f"i{k}" for k in range(12)]
decisions_st = st.builds(
    Decision,
    item_id=st.sampled_from(IDS),
    action=st.sampled_from(["included", "dropped", "compressed", "clipped"]),
    reason=st.just(""),
    tokens_before=st.integers(min_value=0, max_value=500),
    tokens_after=st.integers(min_value=0, max_value=500),
)
selections = st.lists(decisions_st, max_size=12).map(lambda ds: {d.item_id: d for d in ds})


@given(before=selections, after=selections)
def test_the_selection_hash_updated_from_a_delta_equals_hashing_the_whole_selection(
    before: dict[str, Decision], after: dict[str, Decision]
) -> None:
    changed, retired = decision_delta(before, after)
    replaced = [before[d.item_id] for d in changed if d.item_id in before]
    removed = [*replaced, *(before[k] for k in retired)]
    updated = updated_selection_hash(selection_hash(before), removed, changed)
    assert updated == selection_hash(after)
    # independent of the order decisions arrive in
    assert selection_hash(dict(reversed(list(after.items())))) == selection_hash(after)


@given(before=selections, after=selections, given_delta=st.booleans(), legacy=st.booleans())
def test_a_selection_rehashed_from_the_last_one_equals_hashing_it_whole(
    before: dict[str, Decision], after: dict[str, Decision], given_delta: bool, legacy: bool
) -> None:
    """A full build or a rebuild digests only what differs from the generation's last
    selection; a legacy or missing previous hash hashes the new selection whole."""
    previous_hash = legacy_selection_hash(before) if legacy else selection_hash(before)
    delta = decision_delta(before, after) if given_delta else None
    event(f"delta {'digested' if not legacy and before else 'whole'}")
    assert rehashed_selection(previous_hash, before, after, delta) == selection_hash(after)
    assert rehashed_selection("", before, after) == selection_hash(after)


def test_a_rehashed_selection_digests_only_the_decisions_that_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The point of it: 1,000 kept decisions are not digested again (a digest of each would
    be the whole hash)."""
    kept = {
        f"k{n}": Decision(item_id=f"k{n}", action="dropped", tokens_before=n) for n in range(1000)
    }
    before = {**kept, "a": Decision(item_id="a", action="included", tokens_after=5)}
    after = {**kept, "b": Decision(item_id="b", action="included", tokens_after=7)}
    previous_hash = selection_hash(before)
    digested = digests_counted(monkeypatch)
    rehashed = rehashed_selection(previous_hash, before, after)
    monkeypatch.undo()
    assert rehashed == selection_hash(after)
    assert sorted(digested) == ["a", "b"]


@given(selection=selections)
def test_legacy_hashes_are_still_verified_in_their_own_scheme(
    selection: dict[str, Decision],
) -> None:
    legacy = legacy_selection_hash(selection)
    assert not legacy.startswith(SELECTION_HASH_PREFIX)
    assert selection_matches(selection, legacy)
    assert selection_matches(selection, selection_hash(selection))
    assert updated_selection_hash(legacy, (), ()) is None  # the caller hashes it all once
    if selection:
        other = {
            k: msgspec.structs.replace(d, tokens_after=d.tokens_after + 1)
            for k, d in selection.items()
        }
        assert not selection_matches(other, legacy)
        assert not selection_matches(other, selection_hash(selection))


@given(
    pool=item_pools(max_size=20),
    extra=extra_items(),
    request=build_requests(),
    name=st.sampled_from(sorted(STRATEGIES)),
    reserve=st.integers(min_value=0, max_value=60),
    data=st.data(),
)
def test_an_append_records_and_renders_what_the_general_path_does(
    *,
    pool: list[Item],
    extra: list[Item],
    request: BuildRequest,
    name: str,
    reserve: int,
    data: st.DataObject,
) -> None:
    request = msgspec.structs.replace(request, strategy=name)
    ids = sorted({i.id for i in pool} | {i.id for i in extra})
    verified = (
        frozenset(data.draw(st.lists(st.sampled_from(ids), unique=True))) if ids else frozenset()
    )
    planned = pack_request(request, reserve)
    plan1 = plan_build(planned, pool, None, COUNTER)

    def record(
        plan: BuildPlan, gen: Generation, ctx: EmittedContext | None, previous: PromptParts | None
    ) -> BuildRecord:
        return record_build(
            agent_id="a",
            plan=plan,
            request=request,
            gen=gen,
            ctx=ctx,
            pack_id=f"p{gen.builds + 1}",
            reserve=reserve,
            verified_ids=verified,
            previous_prompt=previous,
            group=None,
            latest_user_input="next?" if ctx else "",
            force_rebuild="",
        )

    rec1 = record(plan1, Generation(number=1), None, None)
    cpb1 = built(rec1)
    gen1 = Generation(
        number=1,
        decisions=apply_decision_delta({}, cpb1.decisions, cpb1.retired),
        order=rec1.prompt.order,
        tokens_used=cpb1.budget_used,
        reserved=reserve,
        builds=1,
        selection_hash=cpb1.selection_hash,
    )
    emitted = {it.id: it for it in plan1.result.items}
    ctx = EmittedContext(
        generation=1,
        decisions=gen1.decisions,
        emitted=emitted,
        order=gen1.order,
        used=plan1.result.used,
    )
    rederived = previous_prompt(ctx)
    assert rederived is not None
    assert rec1.stable_prompt == rederived  # what the engine keeps is what the log re-derives
    plan2 = plan_build(planned, [*pool, *extra], ctx, COUNTER)
    event(
        f"second build: {plan2.kind}, {'some' if plan2.appended and plan2.appended.items else 'no'} new items"
    )
    if plan2.kind != "append":
        return
    # the decisions and their delta
    fast, changed = append_decisions(plan2, gen1.decisions, verified)
    spec = final_decisions(plan2, gen1.decisions, verified)
    assert list(fast.items()) == list(spec.items())
    assert (changed, ()) == decision_delta(gen1.decisions, spec)
    # the recorded event and the prompt
    rec2 = record(plan2, gen1, ctx, rederived)
    cpb2 = built(rec2)
    assert cpb2.selection_hash == selection_hash(spec)
    assert cpb2.decisions == changed
    status = f"Generation 1 · {plan2.result.used}/{request.budget} tokens · strategy {name}"
    general = compose(
        plan2.result.items,
        emitted_order=ctx.order,
        static_ids=frozenset(ctx.emitted) - frozenset(ctx.order),
        status=status,
        latest_user_input="next?",
    )
    assert rec2.prompt == general
    assert cpb2.order_appended == tuple(i for i in general.order if i not in set(gen1.order))
    assert cpb2.expected_cached_bytes == len(rederived.stable.encode("utf-8"))
    appended = compose_append(
        rederived,
        plan2.appended.items if plan2.appended else (),
        status=status,
        latest_user_input="next?",
    )
    if appended is None:  # the fast path declines only where the docstring says it does
        added = plan2.appended.items if plan2.appended else ()
        added_ids = [i.id for i in added]
        assert (
            rederived.segments[Segment.VOLATILE]
            or any(i.source is Source.RECALLED_MEMORY for i in added)
            or len(set(added_ids)) < len(added_ids)
            or set(added_ids) & set(rederived.order)
        )
    else:
        assert appended == general


def _new_candidates_one_by_one(
    candidates: list[Item], ctx: EmittedContext, keep: frozenset[str]
) -> list[Item]:
    """The specification of ``new_candidates``: each candidate tested in turn."""
    out = []
    for item in candidates:
        d = ctx.decisions.get(item.id)
        if d is None or (
            d.action == "dropped"
            and (
                item.pinned
                or item.mandatory
                or item.source is Source.ROLE_INSTRUCTION
                or item.id in keep
            )
        ):
            out.append(item)
    return out


@given(pool=item_pools(max_size=25), extra=extra_items(), data=st.data())
def test_new_candidates_are_the_ones_tested_one_by_one(
    pool: list[Item], extra: list[Item], data: st.DataObject
) -> None:
    candidates = [*pool, *extra]
    ids = [c.id for c in candidates]
    decided = data.draw(st.lists(st.sampled_from(ids), unique=True)) if ids else []
    decisions = {
        i: Decision(
            item_id=i,
            action=data.draw(st.sampled_from(["included", "dropped", "compressed"])),
            reason="",
            tokens_before=1,
            tokens_after=1,
        )
        for i in decided
    }
    keep = frozenset(data.draw(st.lists(st.sampled_from([*ids, "not-a-candidate"]), max_size=4)))
    ctx = EmittedContext(generation=1, decisions=decisions, emitted={}, order=(), used=0)
    assert new_candidates(candidates, ctx, keep, set(ids)) == _new_candidates_one_by_one(
        candidates, ctx, keep
    )
