"""A fold that owns its model changes in place only what no snapshot can reach.

``LiveFolds`` hands a frozen model over to the fold it opens; the pool's fold then skips the
copy of an agent's ``items``/``seq``/``seen``, and the generations fold the copy of the
current generation's decisions, when ``holders`` accounts for every reference to them. These
tests hold snapshots at every level of both models — the model, its agent map, one agent,
its generations, the current generation, each dict — or drop them, at random points of
random histories: whatever is held never changes, the models equal the pure folds, and when
nothing is held the dicts really are reused (no copy), while a held one is copied.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxledger.domain import events as ev
from ctxledger.domain.model import AgentIdentity, Decision, Item, Layer, Source
from ctxledger.projections.batch import LiveFolds, fold_stream
from ctxledger.projections.catalog import PROJECTIONS
from ctxledger.projections.drafts import holders
from tests.oracles.folds import fold_all
from tests.property.test_batch_replay import histories

CPYTHON = sys.implementation.name == "cpython" and getattr(sys, "_is_gil_enabled", lambda: True)()
_AT = datetime(2026, 1, 1, tzinfo=UTC)

_PATHS: dict[str, dict[str, tuple[str, ...] | None]] = {
    "pool": {
        "drop": None,
        "model": (),
        "by_agent": ("by_agent",),
        "agent": ("by_agent", "first"),
        "items": ("by_agent", "first", "items"),
        "seq": ("by_agent", "first", "seq"),
        "seen": ("by_agent", "first", "seen"),
    },
    "generations": {
        "drop": None,
        "model": (),
        "by_agent": ("by_agent",),
        "agent": ("by_agent", "first"),
        "generations": ("by_agent", "first", "generations"),
        "current": ("by_agent", "first", "generations", "last"),
        "decisions": ("by_agent", "first", "generations", "last", "decisions"),
    },
}
"""Per model, what a reader may keep of a snapshot: a path from the model down to the part
(``first``: the map's first agent, ``last``: the tuple's last element; None: dropped)."""


def _part(model: Any, name: str, part: str) -> Any:
    """The part of a snapshot of model *name* a reader keeps (None: nothing, or no agent)."""
    path = _PATHS[name][part]
    if path is None:
        return None
    found = model
    for step in path:
        if step == "first":
            found = next(iter(found.values()), None)
        elif step == "last":
            found = found[-1]
        else:
            found = getattr(found, step)
        if found is None:
            return None
    return found


def _live() -> LiveFolds:
    return LiveFolds({p.name: p.initial() for p in PROJECTIONS}, PROJECTIONS)


@pytest.mark.parametrize("name", sorted(_PATHS))
@settings(max_examples=200, deadline=None)
@given(histories(), st.data())
def test_snapshots_held_at_any_level_never_change(
    name: str, seq: list[ev.Event], data: st.DataObject
) -> None:
    live = _live()
    kept: list[tuple[Any, bytes]] = []
    cuts = sorted(data.draw(st.lists(st.integers(0, len(seq)), max_size=8)))
    start = 0
    for cut in [*cuts, len(seq)]:
        live.feed(seq[start:cut])
        start = max(start, cut)
        part = _part(live.get(name), name, data.draw(st.sampled_from(sorted(_PATHS[name]))))
        if part is not None:
            kept.append((part, msgspec.json.encode(part)))
        del part
    final = live.all()[name]
    assert final == getattr(fold_all(seq), name)
    for part, encoded in kept:
        assert msgspec.json.encode(part) == encoded  # never changed by a later feed


def _recorded(n: int, agent_id: str = "a") -> ev.ItemRecorded:
    item = Item(
        id=f"i{n}", layer=Layer.L0, source=Source.TEST_RESULT, content=f"seen {n}", token_count=3
    )
    return ev.ItemRecorded(agent_id=agent_id, item=item, at=_AT)


def _registered(agent_id: str = "a") -> ev.AgentRegistered:
    return ev.AgentRegistered(agent=AgentIdentity(agent_id=agent_id, role="worker"), at=_AT)


@pytest.mark.skipif(not CPYTHON, reason="in-place reuse needs CPython's exact reference counts")
@pytest.mark.parametrize("part", [p for p in _PATHS["pool"] if p != "drop"])
def test_a_dropped_snapshot_is_reused_and_a_held_one_copied(part: str) -> None:
    live = _live()
    live.feed([_registered(), _recorded(0), _recorded(1)])
    before = id(live.get("pool").by_agent["a"].items)  # read, and dropped at once
    live.feed([_recorded(2)])
    after = id(live.get("pool").by_agent["a"].items)
    assert after == before  # nothing held it: extended in place, not copied
    assert list(live.get("pool").by_agent["a"].items) == ["i0", "i1", "i2"]

    held = _part(live.get("pool"), "pool", part)
    encoded = msgspec.json.encode(held)
    items_before = id(live.get("pool").by_agent["a"].items)
    live.feed([_recorded(3)])
    items_now = id(live.get("pool").by_agent["a"].items)
    assert items_now != items_before  # a snapshot held part of it: copied
    assert list(live.get("pool").by_agent["a"].items) == ["i0", "i1", "i2", "i3"]
    assert msgspec.json.encode(held) == encoded


def _pack(n: int, *item_ids: str) -> ev.ContextPackBuilt:
    decisions = tuple(
        Decision(item_id=i, action="included", tokens_before=3, tokens_after=3) for i in item_ids
    )
    return ev.ContextPackBuilt(
        at=_AT, agent_id="a", pack_id=f"a/g1/v{n}", decisions=decisions, order_appended=item_ids
    )


def _decisions_id(live: LiveFolds) -> int:
    return id(live.get("generations").by_agent["a"].generations[-1].decisions)


@pytest.mark.skipif(not CPYTHON, reason="in-place reuse needs CPython's exact reference counts")
@pytest.mark.parametrize("part", [p for p in _PATHS["generations"] if p != "drop"])
def test_a_dropped_generation_is_reused_and_a_held_one_copied(part: str) -> None:
    live = _live()
    live.feed([_registered(), _pack(1, "i0"), _pack(2, "i1")])
    before = _decisions_id(live)
    live.feed([_pack(3, "i2")])
    after = _decisions_id(live)
    assert after == before  # nothing held it: extended in place
    assert list(live.get("generations").by_agent["a"].generations[-1].decisions) == [
        "i0",
        "i1",
        "i2",
    ]

    held = _part(live.get("generations"), "generations", part)
    encoded = msgspec.json.encode(held)
    before = _decisions_id(live)
    live.feed([_pack(4, "i3")])
    after = _decisions_id(live)
    assert after != before  # a snapshot held part of it: copied
    assert msgspec.json.encode(held) == encoded
    assert (
        live.all()["generations"]
        == fold_all([_registered(), *(_pack(n + 1, f"i{n}") for n in range(4))]).generations
    )


def test_a_replay_never_changes_the_states_it_starts_from() -> None:
    """``fold_stream`` is given models its caller still holds: they are copied, not reused."""
    live = _live()
    live.feed([_registered(), _recorded(0)])
    states = live.all()
    encoded = msgspec.json.encode(states["pool"])
    out = fold_stream(states, iter([_recorded(1), _recorded(2)]), PROJECTIONS)
    assert msgspec.json.encode(states["pool"]) == encoded
    assert list(out["pool"].by_agent["a"].items) == ["i0", "i1", "i2"]


@pytest.mark.skipif(not CPYTHON, reason="counts references the CPython way")
def test_holders_counts_the_references_besides_the_argument() -> None:
    # (counted outside the asserts: pytest's rewritten asserts hold what they inspect)
    box: list[object] = [object()]
    alone = holders(box[0])
    other = [box[0]]
    in_two = holders(box[0])
    local = box[0]
    in_three = holders(box[0])
    del other, local
    again = holders(box[0])
    assert (alone, in_two, in_three, again) == (1, 2, 3, 1)
