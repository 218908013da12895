"""record_build, final_decisions and build_started (domain/build_record.py) on hand-made pools
planned by the generation policy: which events an initial, append or rebuild outcome records,
the decision delta and selection hash, budgets and the expected cached bytes."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest

from ctxledger.domain import events as ev
from ctxledger.domain.build_record import (
    BuildRecord,
    build_started,
    final_decisions,
    record_build,
)
from ctxledger.domain.generation_policy import (
    PLANNER_VERSION,
    BuildPlan,
    EmittedContext,
    plan_build,
)
from ctxledger.domain.model import (
    Generation,
    Item,
    Layer,
    Source,
    apply_decision_delta,
    selection_hash,
)
from ctxledger.domain.prompt import PromptParts
from ctxledger.domain.recall import RecallGroup
from ctxledger.domain.request import BuildRequest, Scope

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
RESERVE = 5


class WordCounter:
    """One token per whitespace-separated word (deterministic, easy to count by hand)."""

    @property
    def name(self) -> str:
        return "words"

    def count(self, text: str) -> int:
        return len(text.split())


COUNTER = WordCounter()


def mk(item_id: str, layer: Layer, source: Source, tokens: int, **kw: object) -> Item:
    """An item of exactly *tokens* words, one line each."""
    content = " ".join(f"{item_id}w{k}" for k in range(tokens))
    item = Item(id=item_id, layer=layer, source=source, content=content, token_count=tokens)
    return msgspec.structs.replace(item, **kw)


# a: the objective (SESSION segment); b, c: GENERATION items.
A = mk("a", Layer.L1, Source.USER_REQUIREMENT, 30)
B = mk("b", Layer.L2, Source.WORKER_FINDING, 20)
C = mk("c", Layer.L0, Source.TOOL_LOG, 10)
POOL = [A, B, C]


def request(**kw: object) -> BuildRequest:
    """The whole prompt's request: 105 tokens, of which RESERVE (5) for the VOLATILE tail."""
    base = BuildRequest(agent_id="a", budget=105, now=NOW, phase="implement", session_id="s")
    return msgspec.structs.replace(base, **kw)


def plan(
    pool: list[Item],
    ctx: EmittedContext | None,
    *,
    force_rebuild: str = "",
    req: BuildRequest | None = None,
) -> BuildPlan:
    """Plan as the engine does: the pack's budget is the request's less the reserve (100)."""
    whole = req if req is not None else request()
    pack_request = msgspec.structs.replace(whole, budget=whole.budget - RESERVE)
    return plan_build(pack_request, pool, ctx, COUNTER, watermark=0.5, force_rebuild=force_rebuild)


def record(
    p: BuildPlan,
    gen: Generation,
    ctx: EmittedContext | None,
    *,
    pack_id: str,
    verified_ids: frozenset[str] = frozenset(),
    previous_prompt: PromptParts | None = None,
    group: RecallGroup | None = None,
    force_rebuild: str = "",
    req: BuildRequest | None = None,
) -> BuildRecord:
    return record_build(
        agent_id="a",
        plan=p,
        request=req if req is not None else request(),
        gen=gen,
        ctx=ctx,
        pack_id=pack_id,
        reserve=RESERVE,
        verified_ids=verified_ids,
        previous_prompt=previous_prompt,
        group=group,
        latest_user_input="",
        force_rebuild=force_rebuild,
    )


def built(rec: BuildRecord) -> ev.ContextPackBuilt:
    last = rec.events[-1]
    assert isinstance(last, ev.ContextPackBuilt)
    return last


def after(rec: BuildRecord, p: BuildPlan, previous: Generation) -> Generation:
    """The generation after *rec*, as replay folds it (delta applied to what it held)."""
    cpb = built(rec)
    base = previous.decisions if rec.kind == "append" else {}
    return Generation(
        number=rec.generation,
        decisions=apply_decision_delta(base, cpb.decisions, cpb.retired),
        order=rec.prompt.order,
        tokens_used=cpb.budget_used,
        reserved=cpb.reserved,
        builds=previous.builds + 1 if rec.kind == "append" else 1,
    )


def emitted(gen: Generation, items: tuple[Item, ...]) -> EmittedContext:
    return EmittedContext(
        generation=gen.number,
        decisions=gen.decisions,
        emitted={it.id: it for it in items},
        order=gen.order,
        used=gen.tokens_used - gen.reserved,
    )


def common_prefix_len(a: str, b: str) -> int:
    """Bytes the UTF-8 encodings of *a* and *b* share from the start (counted one by one)."""
    n = 0
    for x, y in zip(a.encode("utf-8"), b.encode("utf-8"), strict=False):
        if x != y:
            break
        n += 1
    return n


GEN1 = Generation(number=1)


def first_build() -> tuple[BuildPlan, BuildRecord, Generation, EmittedContext]:
    p = plan(POOL, None)
    rec = record(p, GEN1, None, pack_id="p1")
    gen = after(rec, p, GEN1)
    return p, rec, gen, emitted(gen, p.result.items)


# --- initial ----------------------------------------------------------------------------------


def test_an_initial_build_records_only_the_pack_with_every_decision() -> None:
    p, rec, _, _ = first_build()
    assert p.kind == "initial"
    assert [type(e).__name__ for e in rec.events] == ["ContextPackBuilt"]
    cpb = built(rec)
    assert (cpb.agent_id, cpb.pack_id, cpb.generation, cpb.at) == ("a", "p1", 1, NOW)
    assert {d.item_id: d.action for d in cpb.decisions} == {
        "a": "included",
        "b": "included",
        "c": "included",
    }
    assert cpb.retired == ()
    assert cpb.included_count == 3
    assert cpb.budget_limit == 105
    assert cpb.budget_used == 65  # 30 + 20 + 10 + reserve 5
    assert cpb.reserved == 5
    assert cpb.overflow == 0
    assert cpb.counter == "words"
    assert cpb.strategy == "variable"
    assert cpb.selection_hash == selection_hash(p.result.decisions)
    # a (the objective) is in SESSION; only b and c are GENERATION items
    assert sorted(cpb.order_appended) == ["b", "c"]
    assert cpb.order_appended == rec.prompt.order
    assert cpb.prompt_bytes == len(rec.prompt.text.encode("utf-8"))
    assert cpb.prefix_hash == rec.prompt.prefix_hash
    assert cpb.expected_cached_bytes == 0 == rec.expected_cached_bytes
    assert cpb.changed_segment == ""
    assert (rec.kind, rec.generation, rec.message) == ("initial", 1, "")
    assert (rec.pack.budget_used, rec.pack.budget_limit, rec.pack.generation) == (65, 105, 1)
    assert "Generation 1 · 60/105 tokens · strategy variable" in rec.prompt.text


def test_an_initial_build_with_recall_records_the_group_before_the_pack() -> None:
    group = RecallGroup(
        text="Recalled: use UTC everywhere",
        memory_ids=("m1", "m2"),
        skipped={"m3": "stale"},
        tokens=4,
        bytes=28,
    )
    p = plan(POOL, None)
    rec = record(p, GEN1, None, pack_id="p1", group=group)
    assert [type(e).__name__ for e in rec.events] == ["RecallRendered", "ContextPackBuilt"]
    rr = rec.events[0]
    assert rr == ev.RecallRendered(
        at=NOW,
        agent_id="a",
        pack_id="p1",
        memory_ids=("m1", "m2"),
        skipped={"m3": "stale"},
        tokens=4,
        bytes=28,
    )
    assert "Recalled: use UTC everywhere" in rec.prompt.text
    assert "Recalled: use UTC everywhere" not in rec.prompt.stable


# --- append -----------------------------------------------------------------------------------


def test_an_append_records_only_the_new_decision_and_caches_the_whole_old_prefix() -> None:
    _, rec1, gen1, ctx = first_build()
    d = mk("d", Layer.L2, Source.VERIFIED_FACT, 15)
    p = plan([*POOL, d], ctx)
    assert p.kind == "append"
    # b is verified now but was emitted unverified: an append keeps it as it was sent
    rec = record(
        p, gen1, ctx, pack_id="p2", verified_ids=frozenset({"b", "d"}), previous_prompt=rec1.prompt
    )
    assert [type(e).__name__ for e in rec.events] == ["ContextPackBuilt"]
    cpb = built(rec)
    assert len(cpb.decisions) == 1
    assert cpb.decisions[0].item_id == "d"
    assert cpb.decisions[0].action == "included"
    assert cpb.decisions[0].verified is True
    assert cpb.retired == ()
    assert cpb.order_appended == ("d",)
    assert cpb.included_count == 4
    assert cpb.budget_used == 80  # 60 + 15 + 5
    assert cpb.generation == 1
    final = final_decisions(p, gen1.decisions, {"b", "d"})
    assert final["b"] is gen1.decisions["b"]
    assert final["b"].verified is False
    assert apply_decision_delta(gen1.decisions, cpb.decisions, cpb.retired) == final
    assert cpb.selection_hash == selection_hash(final)
    # the new prompt extends the old stable part: all of it is expected to be cached
    old_stable = rec1.prompt.stable.encode("utf-8")
    assert rec.prompt.text.encode("utf-8").startswith(old_stable)
    assert cpb.expected_cached_bytes == len(old_stable) == rec.expected_cached_bytes
    assert cpb.expected_cached_bytes == common_prefix_len(rec1.prompt.stable, rec.prompt.text)
    assert (rec.kind, rec.generation, rec.message) == ("append", 1, "")


def test_an_append_with_nothing_new_records_an_empty_delta() -> None:
    _, rec1, gen1, ctx = first_build()
    p = plan(POOL, ctx)
    assert p.kind == "append"
    rec = record(p, gen1, ctx, pack_id="p2", previous_prompt=rec1.prompt)
    cpb = built(rec)
    assert (cpb.decisions, cpb.retired, cpb.order_appended) == ((), (), ())
    assert cpb.selection_hash == built(rec1).selection_hash
    assert cpb.included_count == 3
    assert cpb.budget_used == 65


# --- rebuild ----------------------------------------------------------------------------------


def test_a_budget_rebuild_records_the_new_generation_first() -> None:
    _, rec1, gen1, ctx = first_build()
    e = mk("e", Layer.L0, Source.TOOL_LOG, 50)  # room is 40
    p = plan([*POOL, e], ctx)
    assert p.kind == "rebuild"
    rec = record(p, gen1, ctx, pack_id="p2", previous_prompt=rec1.prompt)
    assert [type(x).__name__ for x in rec.events] == ["GenerationRefreshed", "ContextPackBuilt"]
    gr = rec.events[0]
    assert isinstance(gr, ev.GenerationRefreshed)
    reason = "budget: next pack needs 110 > 100 tokens"
    assert (gr.kind, gr.from_generation, gr.to_generation) == ("rebuild", 1, 2)
    assert (gr.reason, gr.trigger, gr.agent_id, gr.at) == (reason, "budget", "a", NOW)
    assert (gr.phase, gr.strategy, gr.budget) == ("implement", "variable", 105)
    assert gr.carried == ("a", "b")  # re-packed into 50: c and e are over budget
    assert gr.dropped == ()
    cpb = built(rec)
    assert cpb.generation == 2
    # a new generation starts from nothing: every decision is recorded, nothing retired
    assert {d.item_id: (d.action, d.reason) for d in cpb.decisions} == {
        "a": ("included", ""),
        "b": ("included", ""),
        "c": ("dropped", "over_budget"),
        "e": ("dropped", "over_budget"),
    }
    assert cpb.retired == ()
    assert cpb.included_count == 2
    assert cpb.budget_used == 55
    assert cpb.order_appended == ("b",)
    assert cpb.selection_hash == selection_hash(p.result.decisions)
    assert rec.message == f"Context rebuilt · Generation 1 → 2 · Reason: {reason}"
    assert (rec.kind, rec.generation, rec.pack.generation) == ("rebuild", 2, 2)
    assert cpb.expected_cached_bytes == common_prefix_len(rec1.prompt.stable, rec.prompt.text)
    # the objective (static) is unchanged, the GENERATION segment now starts with b, not c
    assert rec.prompt.static == rec1.prompt.static
    static_len = len(rec1.prompt.static.encode("utf-8"))
    assert static_len <= cpb.expected_cached_bytes < len(rec1.prompt.stable.encode("utf-8"))
    assert not any(isinstance(x, ev.ContextBuildingStarted) for x in rec.events)


def test_a_forced_rebuild_with_recall_records_refresh_recall_pack_in_order() -> None:
    _, rec1, gen1, ctx = first_build()
    group = RecallGroup(text="Recalled: m1", memory_ids=("m1",), tokens=2, bytes=12)
    p = plan(POOL, ctx, force_rebuild="manual")
    assert p.kind == "rebuild"
    rec = record(
        p, gen1, ctx, pack_id="p2", previous_prompt=rec1.prompt, group=group, force_rebuild="manual"
    )
    assert [type(x).__name__ for x in rec.events] == [
        "GenerationRefreshed",
        "RecallRendered",
        "ContextPackBuilt",
    ]
    gr = rec.events[0]
    assert isinstance(gr, ev.GenerationRefreshed)
    assert (gr.kind, gr.trigger, gr.reason) == ("rebuild", "manual", "manual")
    assert (gr.from_generation, gr.to_generation) == (1, 2)
    assert sorted(gr.carried) == ["a", "b"]  # target 50 = a 30 + b 20
    rr = rec.events[1]
    assert isinstance(rr, ev.RecallRendered)
    assert (rr.pack_id, rr.memory_ids, rr.tokens, rr.bytes) == ("p2", ("m1",), 2, 12)
    cpb = built(rec)
    assert cpb.generation == 2
    assert cpb.included_count == 2
    assert cpb.budget_used == 55
    assert rec.message == "Context rebuilt · Generation 1 → 2 · Reason: manual"


# --- final_decisions --------------------------------------------------------------------------


def test_a_clipped_item_carries_the_text_sent_and_a_verified_one_is_marked() -> None:
    big = msgspec.structs.replace(
        mk("big", Layer.L0, Source.TOOL_LOG, 60),
        content="\n".join(f"line {k} of the log" for k in range(15)),
    )
    req = request(scope=Scope(clip_above_tokens=20))
    p = plan([A, B, big], None, req=req)
    raw = p.result.decisions["big"]
    assert raw.action == "clipped"
    sent = {it.id: it for it in p.result.items}["big"].content
    assert "tokens clipped" in sent
    final = final_decisions(p, {}, {"b", "big", "zz"})
    assert final["big"].content == sent
    assert final["big"].verified is True
    assert final["b"].verified is True
    assert final["a"].verified is False
    assert set(final) == {"a", "b", "big"}


def test_a_dropped_item_is_never_marked_verified() -> None:
    e = mk("e", Layer.L0, Source.TOOL_LOG, 95)  # does not fit next to a, b, c
    p = plan([*POOL, e], None)
    assert p.result.decisions["e"].action == "dropped"
    final = final_decisions(p, {}, {"e"})
    assert final["e"].verified is False
    assert final["e"] == p.result.decisions["e"]


# --- build_started ----------------------------------------------------------------------------


def test_build_started_carries_every_planner_input() -> None:
    req = request(stage_id="st-1", budget=900)
    started = build_started(
        req,
        pack_id="p9",
        generation=3,
        watermark=0.4,
        counter="words",
        force_rebuild="manual",
        overrides=("budget", "strategy"),
    )
    assert started == ev.ContextBuildingStarted(
        at=NOW,
        agent_id="a",
        pack_id="p9",
        session_id="s",
        stage_id="st-1",
        generation=3,
        request=req,
        watermark=0.4,
        counter="words",
        planner_version=PLANNER_VERSION,
        force_rebuild="manual",
        overrides=("budget", "strategy"),
    )
    assert started.planner_version == PLANNER_VERSION == 4


@pytest.mark.parametrize("overrides", [(), ("scope",)])
def test_build_started_defaults_and_round_trip(overrides: tuple[str, ...]) -> None:
    started = build_started(
        request(), pack_id="p1", generation=1, watermark=0.5, counter="words", overrides=overrides
    )
    assert started.force_rebuild == ""
    assert started.overrides == overrides
    decoded = msgspec.json.decode(msgspec.json.encode(started), type=ev.ContextBuildingStarted)
    assert decoded == started
