"""Hypothesis strategies for candidate pools and build requests (packing property tests)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
from hypothesis import strategies as st

from ctxledger.domain.model import Durability, Item, Layer, Source
from ctxledger.domain.request import BuildRequest, Scope

__all__ = [
    "NOW",
    "STAGES",
    "TASKS",
    "build_requests",
    "item_pools",
    "pool_items",
    "scopes",
    "staged_pools",
]

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
TASKS = ("t1", "t2", "t3", "")
PHASES = ("", "explore", "implement", "verify")
ROLES = ("", "primary", "worker", "probe", "reviewer")
STAGES = ("", "", "s1", "s2")
_WORDS = ("auth", "login", "token", "cache", "FAILED", "Error", "src/app.py", "fix", "x" * 30)

_LOG_LINES = (
    "FAILED tests/test_app.py::test_login - AssertionError: boom",
    "E   AssertionError: assert 1 == 2",
    "tests/test_app.py:12: AssertionError",
    "===== 1 failed, 3 passed in 0.12s =====",
    "Traceback (most recent call last):",
    '  File "src/app.py", line 3, in run',
    "    return login()",
    "ValueError: bad token",
    "collected 4 items",
    "some ordinary output line that carries no signal at all",
    "$ pytest -q",
)
# Content is drawn from a small space so that duplicates (same content hash) occur; long
# multi-line logs exercise compression and clipping.
_contents = st.one_of(
    st.sampled_from(["", "same text", "dup dup dup", "line\n" * 40]),
    st.lists(st.sampled_from(_LOG_LINES), min_size=10, max_size=120).map("\n".join),
    st.lists(st.sampled_from(_WORDS), min_size=1, max_size=60).map(" ".join),
    st.text(min_size=0, max_size=300),
)


@st.composite
def pool_items(draw: st.DrawFn, *, item_id: str) -> Item:
    """One item with every field that packing looks at drawn from a small space."""
    layer = draw(st.sampled_from(list(Layer)))
    # Per-source rules (artifact versions, tool-log dedupe, conversation window) need company.
    source = draw(
        st.one_of(
            st.sampled_from(list(Source)),
            st.sampled_from([Source.ARTIFACT, Source.CONVERSATION, Source.TOOL_LOG]),
        )
    )
    content = draw(_contents)
    minutes = draw(st.one_of(st.none(), st.integers(min_value=0, max_value=60 * 24 * 30)))
    return Item(
        id=item_id,
        layer=layer,
        source=source,
        content=content,
        token_count=draw(st.one_of(st.just(0), st.integers(min_value=1, max_value=400))),
        task=draw(st.sampled_from(TASKS)),
        phase=draw(st.sampled_from(PHASES)),
        observed_at=None if minutes is None else NOW - timedelta(minutes=minutes),
        confidence=draw(st.floats(min_value=0.0, max_value=1.0)),
        relevance=draw(st.floats(min_value=0.0, max_value=1.0)),
        durability=draw(st.sampled_from(list(Durability))),
        verified=draw(st.booleans()),
        files=tuple(draw(st.lists(st.sampled_from(["src/app.py", "src/db.py", "README.md"]),
                                  max_size=2, unique=True))),
        symbols=tuple(draw(st.lists(st.sampled_from(["App.run", "login", "Cache"]), max_size=2,
                                    unique=True))),
        source_id=draw(st.sampled_from(["", "", "a1", "a2"])),
        pinned=draw(st.integers(0, 15)) == 0,
        mandatory=draw(st.integers(0, 19)) == 0,
        group=draw(st.sampled_from(["", "", "", "g1", "g2", "g3"])),
        failure=draw(st.integers(0, 5)) == 0,
    )  # fmt: skip


@st.composite
def item_pools(draw: st.DrawFn, *, max_size: int = 30) -> list[Item]:
    """A pool of items with unique ids (``i00``, ``i01``…)."""
    n = draw(st.integers(min_value=0, max_value=max_size))
    return [draw(pool_items(item_id=f"i{k:02d}")) for k in range(n)]


@st.composite
def scopes(draw: st.DrawFn) -> Scope:
    if draw(st.booleans()):
        return Scope()
    return Scope(
        layers=tuple(draw(st.lists(st.sampled_from(list(Layer)), max_size=3, unique=True))),
        sources=tuple(draw(st.lists(st.sampled_from(list(Source)), max_size=6, unique=True))),
        exclude_project_memory=draw(st.booleans()),
        dependency_task_ids=draw(
            st.one_of(st.none(), st.lists(st.sampled_from(TASKS), max_size=2).map(tuple))
        ),
        clip_above_tokens=draw(st.sampled_from([0, 0, 5, 20, 60, 150])),
    )


@st.composite
def build_requests(draw: st.DrawFn, *, strategy: str = "variable") -> BuildRequest:
    return BuildRequest(
        agent_id="agent-1",
        budget=draw(st.integers(min_value=1, max_value=3000)),
        now=NOW,
        task=draw(st.sampled_from(TASKS)),
        role=draw(st.sampled_from(ROLES)),
        phase=draw(st.sampled_from(PHASES)),
        strategy=strategy,
        files=tuple(draw(st.lists(st.sampled_from(["src/app.py", "src/db.py"]), max_size=2))),
        symbols=tuple(draw(st.lists(st.sampled_from(["App.run", "login"]), max_size=2))),
        keywords=tuple(draw(st.lists(st.sampled_from(["auth", "cache"]), max_size=2))),
        failures=tuple(draw(st.lists(st.sampled_from(["FAILED tests/x.py::t"]), max_size=1))),
        scope=draw(scopes()),
    )


@st.composite
def staged_pools(draw: st.DrawFn, *, max_size: int = 40) -> tuple[list[Item], tuple[str, ...], str]:
    """``(pool, keep_ids, stage_id)``: a pool whose steering notes are scoped to stages, now
    and then with a repeated id; ids to keep (repeats and unknown ids included, or none);
    the stage being built."""
    pool = draw(item_pools(max_size=max_size))
    pool = [
        msgspec.structs.replace(it, stage=draw(st.sampled_from(STAGES)))
        if it.source is Source.STEERING_NOTE
        else it
        for it in pool
    ]
    if pool and draw(st.integers(0, 9)) == 0:
        pool.append(msgspec.structs.replace(pool[-1], content="a repeated id"))
    ids = [it.id for it in pool] + ["unknown"]
    keep = draw(st.lists(st.sampled_from(ids), max_size=5)) if draw(st.booleans()) else []
    return pool, tuple(keep), draw(st.sampled_from(STAGES))
