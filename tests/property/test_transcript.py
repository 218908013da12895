"""The prompt reads as a transcript (issue 33): step order within a generation, an action
before its observation, role instructions always in, and the working set equal to recomputing
it from the history."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import msgspec
from hypothesis import event, given
from hypothesis import strategies as st

from ctxledger.domain.build_record import record_build
from ctxledger.domain.events import ItemRecorded
from ctxledger.domain.generation_policy import (
    WORKING_SET_MAX,
    WORKING_SET_SHARE,
    EmittedContext,
    plan_build,
)
from ctxledger.domain.model import Generation, Item, Layer, Source
from ctxledger.domain.prompt import compose, compose_append, render_item
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.strategies import BASELINES, strategy_names
from ctxledger.domain.tokens import EstimatingCounter
from ctxledger.domain.working_set import is_working_set, working_set_item

COUNTER = EstimatingCounter()
NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
ENGINE = [n for n in strategy_names() if n not in BASELINES]
WORDS = st.sampled_from(
    ["pytest tests/test_app.py", "cat src/app.py", "sed -i 's/a/b/' src/db.py", "ls",
     "FAILED tests/test_app.py::test_login", "def login(user):", "ok", "grep -n run_job src"]
)  # fmt: skip


@st.composite
def runs(draw: st.DrawFn) -> list[Item]:
    """A recorded run: role instructions, a pinned objective, then steps of an action and
    (mostly) an observation sharing the step's group, in recording order."""
    items: list[Item] = []
    for n in range(draw(st.integers(0, 2))):
        text = f"role rule {n}: " + draw(WORDS)
        items.append(
            Item(
                id=f"role{n}",
                layer=Layer.L1,
                source=Source.ROLE_INSTRUCTION,
                content=text,
                token_count=COUNTER.count(text) + 4,
            )
        )
    items.append(
        Item(
            id="task",
            layer=Layer.L1,
            source=Source.USER_REQUIREMENT,
            content="fix login",
            token_count=8,
            pinned=True,
            mandatory=True,
        )
    )
    for s in range(draw(st.integers(0, 14))):
        group = f"step-{s:04d}"
        command = draw(WORDS)
        body = "\n".join(draw(st.lists(WORDS, min_size=1, max_size=30)))
        failed = "FAILED" in body
        parts = [("action", Source.CONVERSATION, command)]
        if draw(st.booleans()) or s == 0:
            parts.append(("observation", Source.TOOL_LOG, body))
        for part, source, text in parts:
            item = Item(
                id=f"s{s:04d}.{part}", layer=Layer.L0, source=source, content=text,
                group=group, tool_signature=command, failure=failed and part != "action",
                files=("src/app.py",) if "app" in text else (),
            )  # fmt: skip
            items.append(
                msgspec.structs.replace(item, token_count=COUNTER.count(render_item(item)))
            )
    return items


def _seq(items: list[Item]) -> dict[str, int]:
    return {it.id: n for n, it in enumerate(items)}


def _steps(order: tuple[str, ...]) -> list[tuple[int, str]]:
    return [(int(i[1:5]), i.split(".")[1]) for i in order if i.startswith("s")]


@given(runs(), st.integers(0, 30), st.sampled_from(ENGINE), st.integers(200, 3000))
def test_every_prompt_of_a_generation_is_in_step_order_action_first(
    run: list[Item], split: int, strategy: str, budget: int
) -> None:
    """Build once on a prefix of the run, then again on the whole run: within every prompt
    the step blocks never go backwards and no observation precedes its action; an append
    keeps the previous prompt as its prefix."""
    head = run[: max(1, min(split, len(run)))]
    request = BuildRequest(agent_id="a", budget=budget, now=NOW, strategy=strategy,
                           latest_step=True)  # fmt: skip
    gen = Generation(number=1)
    plan1 = plan_build(
        request, head, None, COUNTER, chronology=_seq(run), history={it.id: it for it in head}
    )
    rec1 = record_build(
        agent_id="a", plan=plan1, request=request, gen=gen, ctx=None, pack_id="p1", reserve=0,
        verified_ids=(), previous_prompt=None, group=None, latest_user_input="",
        force_rebuild="", chronology=_seq(run),
    )  # fmt: skip
    ctx = EmittedContext(
        generation=1,
        decisions=dict(plan1.result.decisions),
        emitted={it.id: it for it in plan1.result.items},
        order=rec1.prompt.order,
        used=plan1.result.used,
    )
    gen1 = Generation(number=1, decisions=ctx.decisions, order=ctx.order, builds=1,
                      tokens_used=ctx.used)  # fmt: skip
    plan2 = plan_build(request, run, ctx, COUNTER, chronology=_seq(run))
    rec2 = record_build(
        agent_id="a", plan=plan2, request=request, gen=gen1, ctx=ctx, pack_id="p2", reserve=0,
        verified_ids=(), previous_prompt=rec1.prompt, group=None, latest_user_input="",
        force_rebuild="", chronology=_seq(run),
    )  # fmt: skip
    for rec in (rec1, rec2):
        steps = _steps(rec.prompt.order)
        assert all(a[0] <= b[0] for a, b in itertools.pairwise(steps))
        for s, part in steps:
            if part == "observation" and (s, "action") in steps:
                assert steps.index((s, "action")) < steps.index((s, part))
    if plan2.kind == "append":
        assert rec2.prompt.stable.startswith(rec1.prompt.stable)


@given(runs(), st.sampled_from(strategy_names()), st.integers(1, 4000))
def test_role_instructions_are_in_every_pack_whole(
    run: list[Item], strategy: str, budget: int
) -> None:
    request = BuildRequest(agent_id="a", budget=budget, now=NOW, strategy=strategy,
                           latest_step=True)  # fmt: skip
    plan = plan_build(request, run, None, COUNTER, chronology=_seq(run))
    for it in run:
        if it.source is Source.ROLE_INSTRUCTION:
            assert plan.result.decisions[it.id].action == "included"
            assert it in plan.result.items


@given(runs(), st.integers(300, 4000), st.sampled_from([0.2, 0.4, 0.9]))
def test_the_working_set_is_what_recomputing_it_from_the_history_gives(
    run: list[Item], budget: int, watermark: float
) -> None:
    """The working set a rebuild records is the one recomputed from scratch from the
    history and what the pack shows; it names only steps the pack leaves out, and a rebuild
    over a pool holding an older one supersedes it."""
    request = BuildRequest(agent_id="a", budget=budget, now=NOW, latest_step=True)
    history = {it.id: it for it in run}
    first = plan_build(request, run, None, COUNTER, chronology=_seq(run), history=history)
    ctx = EmittedContext(
        generation=1,
        decisions=dict(first.result.decisions),
        emitted={it.id: it for it in first.result.items},
        order=tuple(it.id for it in first.result.items),
        used=first.result.used,
    )
    pool = [*run, *([first.working_set] if first.working_set is not None else [])]
    plan = plan_build(
        request, pool, ctx, COUNTER, watermark=watermark, force_rebuild="manual",
        chronology=_seq(pool), history={it.id: it for it in pool},
    )  # fmt: skip
    ws = plan.working_set
    shown = {k for k, d in plan.result.decisions.items() if d.action != "dropped"}
    if ws is None:
        return
    # the spec of its size: its share of the room beside the forced part, within what the
    # pack left of the budget
    fixed = sum(it.token_count for it in pool if it.pinned or it.source is Source.ROLE_INSTRUCTION)
    share = min(WORKING_SET_MAX, int(max(0, budget - fixed) * WORKING_SET_SHARE))
    room = budget - (plan.result.used - ws.token_count)
    again = working_set_item(
        tuple(it for it in pool), shown - {ws.id}, agent="a", token_budget=min(share, room),
        count=lambda it: COUNTER.count(render_item(it)),
    )  # fmt: skip
    assert again == ws
    event("a rebuild extracted a working set")
    assert is_working_set(ws)
    assert plan.result.decisions[ws.id].action == "included"
    hidden = {it.group for it in run if it.group and it.id not in shown}
    assert hidden, "a working set only when steps are left out"
    for old in pool:
        if is_working_set(old) and old.id != ws.id:
            assert plan.result.decisions[old.id].reason == "superseded"
    rec = record_build(
        agent_id="a", plan=plan, request=request, gen=Generation(number=1), ctx=ctx,
        pack_id="p2", reserve=0, verified_ids=(), previous_prompt=None, group=None,
        latest_user_input="", force_rebuild="manual", chronology=_seq(pool),
    )  # fmt: skip
    recorded = [e.item for e in rec.events if isinstance(e, ItemRecorded)]
    assert recorded == [ws]
    # it leads the GENERATION segment
    assert rec.prompt.order[0] == ws.id


@given(runs(), st.integers(0, 30))
def test_compose_append_equals_composing_again_in_recording_order(
    run: list[Item], split: int
) -> None:
    """The within-generation fast path equals composing every item again with the frozen
    static part and the previous order, in recording order."""
    seq = _seq(run)
    first, added = run[:split], run[split:]
    previous = compose(first, chronology=seq)
    static = frozenset(i.id for i in first) - frozenset(previous.order)
    fast = compose_append(previous, added, chronology=seq)
    slow = compose(
        [*first, *added], emitted_order=previous.order, static_ids=static, chronology=seq
    )
    if fast is not None:
        assert fast == slow
    steps = _steps(slow.order)
    assert steps == sorted(steps, key=lambda p: (p[0], p[1] != "action"))
