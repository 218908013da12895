"""The generations model's stored form (each generation's decisions as a delta against the
previous generation's) round-trips exactly: same decisions, same key order, same bytes when
encoded whole; equal decisions of consecutive generations come back as one object; the form
of older versions (the whole model as JSON) still decodes; an inconsistent delta is a
DecodeError, never a wrong model."""

from __future__ import annotations

import itertools

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxledger.adapters.ledger.projection_runner import decode_state, encode_state, store_state
from ctxledger.domain.errors import DecodeError
from ctxledger.domain.model import AgentIdentity, Decision, Generation
from ctxledger.projections.catalog import PROJECTIONS, fold_all
from ctxledger.projections.generations import AgentGenerations, Generations
from ctxledger.projections.generations_stored import (
    StoredGenerations,
    decode_generations,
    encode_generations,
    to_stored,
)
from tests.property.test_batch_replay import histories

GENERATIONS = next(p for p in PROJECTIONS if p.name == "generations")
KEYS = [f"it_{n:02d}" for n in range(12)]

decisions = st.builds(
    Decision,
    item_id=st.sampled_from(KEYS),
    action=st.sampled_from(["included", "dropped", "compressed", "clipped"]),
    reason=st.sampled_from(["", "budget", "stale"]),
    tokens_before=st.integers(0, 50),
    tokens_after=st.integers(0, 50),
)


@st.composite
def generation_runs(draw: st.DrawFn) -> tuple[Generation, ...]:
    """Generations whose decision maps are random edits of the previous one: keys moved,
    added and removed, decisions changed or kept (the same object or an equal copy)."""
    gens: list[Generation] = []
    current: dict[str, Decision] = {}
    for number in range(1, draw(st.integers(1, 6)) + 1):
        keys = list(current)
        kept = draw(st.lists(st.sampled_from(keys), unique=True)) if keys else []
        added = draw(st.lists(st.sampled_from(KEYS), unique=True, max_size=5))
        order = list(dict.fromkeys([*kept, *added]))
        order = draw(st.permutations(order)) if draw(st.booleans()) else order
        nxt: dict[str, Decision] = {}
        for key in order:
            before = current.get(key)
            how = draw(st.sampled_from(["same", "copy", "new"])) if before else "new"
            if how == "same" and before is not None:
                nxt[key] = before
            elif how == "copy" and before is not None:
                nxt[key] = msgspec.structs.replace(before)
            else:
                nxt[key] = msgspec.structs.replace(draw(decisions), item_id=key)
        gens.append(
            Generation(number=number, builds=draw(st.integers(0, 9)), decisions=nxt, order=())
        )
        current = nxt
    return tuple(gens)


@st.composite
def models(draw: st.DrawFn) -> Generations:
    agents = draw(st.lists(st.sampled_from(["a", "b", "c"]), unique=True, max_size=3))
    return Generations(
        by_agent={
            agent_id: AgentGenerations(
                agent=AgentIdentity(agent_id=agent_id, role="worker"),
                generations=draw(generation_runs()),
                refresh_streak=draw(st.integers(0, 3)),
            )
            for agent_id in agents
        }
    )


def _round_trip(model: Generations) -> Generations:
    return decode_state(GENERATIONS, store_state(GENERATIONS, model))  # type: ignore[no-any-return]


def _assert_same(back: Generations, model: Generations) -> None:
    assert encode_state(back) == encode_state(model)
    for agent_id, ag in model.by_agent.items():
        for got, want in zip(back.by_agent[agent_id].generations, ag.generations, strict=True):
            assert list(got.decisions) == list(want.decisions)  # key order kept


@settings(max_examples=300, deadline=None)
@given(models())
def test_stored_form_round_trips_any_model(model: Generations) -> None:
    back = _round_trip(model)
    _assert_same(back, model)
    for ag in back.by_agent.values():
        for older, newer in itertools.pairwise(ag.generations):
            for key, decision in newer.decisions.items():
                before = older.decisions.get(key)
                if before is not None and before == decision:
                    assert before is decision  # one object, not a copy per generation


@settings(max_examples=100, deadline=None)
@given(histories())
def test_stored_form_round_trips_folded_histories(seq: list[object]) -> None:
    model = fold_all(seq).generations  # type: ignore[arg-type]
    _assert_same(_round_trip(model), model)


@settings(max_examples=100, deadline=None)
@given(models())
def test_the_whole_model_as_older_versions_stored_it_still_decodes(model: Generations) -> None:
    back = decode_generations(encode_state(model))
    assert encode_state(back) == encode_state(model)


def test_a_long_run_of_similar_generations_is_stored_small() -> None:
    """200 generations over 500 items where each rebuild changes 3 decisions and moves one
    item to the front: whole, every generation repeats all 500; as deltas, it is a few."""
    current = {
        f"it_{n:04d}": Decision(item_id=f"it_{n:04d}", action="dropped", tokens_before=40)
        for n in range(500)
    }
    gens = []
    for number in range(1, 201):
        moved = f"it_{(number * 7) % 500:04d}"
        nxt = {moved: current[moved], **{k: d for k, d in current.items() if k != moved}}
        for k in (f"it_{(number * 13 + j) % 500:04d}" for j in range(3)):
            nxt[k] = Decision(item_id=k, action="included", tokens_before=number)
        gens.append(Generation(number=number, decisions=nxt))
        current = nxt
    model = Generations(
        by_agent={
            "a": AgentGenerations(
                agent=AgentIdentity(agent_id="a", role="worker"), generations=tuple(gens)
            )
        }
    )
    whole, stored = encode_state(model), encode_generations(model)
    assert len(stored) * 50 < len(whole), (len(stored), len(whole))
    _assert_same(decode_generations(stored), model)


def _corrupt(model: Generations, **changes: object) -> bytes:
    stored = to_stored(model)
    sa = stored.by_agent["a"]
    second = msgspec.structs.replace(sa.generations[1], **changes)
    agent = msgspec.structs.replace(sa, generations=(sa.generations[0], second))
    return msgspec.json.encode(StoredGenerations(format=stored.format, by_agent={"a": agent}))


@pytest.mark.parametrize(
    "changes",
    [
        {"runs": ((0, 99),)},  # past the previous generation's keys
        {"runs": ((-1, 5),)},  # more new keys than there are
        {"runs": ((-7, 1),)},  # a start that is neither a position nor NEW
        {"runs": ((0, 0),)},  # an empty run
        {"runs": ()},  # a new decision placed nowhere
        {  # a changed decision for a key the order leaves out
            "runs": ((0, 2), (-1, 1)),
            "changed": {
                "it_50": Decision(item_id="it_50", action="included"),
                "it_02": Decision(item_id="it_02", action="included"),
            },
        },
    ],
)
def test_an_inconsistent_delta_is_a_decode_error(changes: dict[str, object]) -> None:
    d = {k: Decision(item_id=k, action="dropped") for k in KEYS[:3]}
    model = Generations(
        by_agent={
            "a": AgentGenerations(
                agent=AgentIdentity(agent_id="a", role="worker"),
                generations=(
                    Generation(number=1, decisions=d),
                    Generation(
                        number=2,
                        decisions={**d, "it_50": Decision(item_id="it_50", action="included")},
                    ),
                ),
            )
        }
    )
    with pytest.raises(DecodeError, match="generations"):
        decode_state(GENERATIONS, _corrupt(model, **changes))
