"""``layered`` over positions (``layered_ranked``) decides exactly what the specification does.

``tests/oracles/layered_spec.select`` over candidate objects is the specification;
``LayeredStrategy.select`` works on the pool's arrays and the facts it keeps per pool
version, given the :class:`Ranked` that ``retrieve`` returns or a list of scored items. Both
must record the same decisions in the same order and select the same items, byte for byte —
for every request (scopes that exclude and clip, steering notes of other stages, repeated
ids), with evictions per layer and class, the last-resort eviction, superseded artifacts,
duplicate tool logs, the conversation window, kept and forced units.
"""

from __future__ import annotations

from datetime import timedelta

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from ctxledger.domain.model import Item, Layer, Source
from ctxledger.domain.packing import PackResult
from ctxledger.domain.request import BuildRequest, Scope
from ctxledger.domain.retrieval import retrieve
from ctxledger.domain.strategies.layered import LayeredStrategy
from ctxledger.domain.tokens import EstimatingCounter
from tests.oracles import layered_spec
from tests.property.strategies_items import NOW, build_requests, staged_pools

COUNTER = EstimatingCounter()


def _encoded(res: PackResult) -> bytes:
    return msgspec.json.encode(res)


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[Item], BuildRequest, int]:
    """A pool (steering notes scoped to stages, now and then a repeated id), a request with
    kept ids (repeats and unknown ids too) and mostly no scope, and a conversation window."""
    pool, keep, stage = draw(staged_pools(max_size=60))
    request = draw(build_requests(strategy="layered"))
    scope = request.scope if draw(st.integers(0, 4)) == 0 else Scope()
    request = msgspec.structs.replace(
        request,
        keep_ids=keep,
        stage_id=stage,
        scope=scope,
        budget=draw(st.one_of(st.integers(1, 400), st.integers(1, 4000))),
    )
    return pool, request, draw(st.integers(0, 6))


@given(cases())
def test_layered_decides_the_same_over_positions(
    case: tuple[list[Item], BuildRequest, int],
) -> None:
    pool, request, keep_last = case
    strategy = LayeredStrategy(conversation_keep_last=keep_last)
    ranked = retrieve(request, pool)
    spec = layered_spec.select(request, list(ranked), COUNTER, keep_last=keep_last)
    for given_as in (ranked, list(ranked)):
        made = strategy.select(request, given_as, COUNTER)
        assert _encoded(made) == _encoded(spec)
        assert list(made.decisions) == list(spec.decisions)
    # Again over the facts kept for this pool version (sizes, age orders, shared decisions).
    again = strategy.select(request, retrieve(request, pool), COUNTER)
    assert _encoded(again) == _encoded(spec)
    assert list(again.decisions) == list(spec.decisions)


def _item(n: int, layer: Layer, source: Source, **fields: object) -> Item:
    return Item(
        id=f"i{n:03d}", layer=layer, source=source, content=f"item {n} " + "x " * 40,
        token_count=50, observed_at=NOW - timedelta(minutes=200 - n), **fields,  # type: ignore[arg-type]
    )  # fmt: skip


def test_every_eviction_and_per_source_rule_meets_the_specification() -> None:
    """One pool that takes every branch: artifact versions, duplicate logs, the window,
    groups of L2 and mixed layers, evictions per class and the last resort."""
    pool: list[Item] = []
    for n in range(6):
        pool.append(_item(n, Layer.L0, Source.ARTIFACT, source_id=f"f{n % 2}"))
    for n in range(6, 12):
        pool.append(
            msgspec.structs.replace(
                _item(n, Layer.L2, Source.TOOL_LOG), content="same log" if n % 2 else f"log {n}"
            )
        )
    for n in range(12, 20):
        pool.append(_item(n, Layer.L0, Source.CONVERSATION))
    for n in range(20, 26):
        pool.append(_item(n, Layer.L2 if n < 23 else Layer.L1, Source.WORKER_FINDING,
                          group=f"g{n % 3}"))  # fmt: skip
    for n in range(26, 34):
        pool.append(_item(n, Layer(n % 3), Source.REPOSITORY_SOURCE))
    pool.append(_item(34, Layer.L1, Source.STEERING_NOTE))
    pool.append(_item(35, Layer.L0, Source.TEST_RESULT, pinned=True))
    pool.append(_item(36, Layer.L0, Source.TEST_RESULT, failure=True))
    strategy = LayeredStrategy(conversation_keep_last=3)
    applied: set[str] = set()
    for budget in (200, 600, 1000, 1400, 5000):
        request = BuildRequest(
            agent_id="a", budget=budget, now=NOW, strategy="layered", keep_ids=("i036", "i021")
        )
        ranked = retrieve(request, pool)
        fast = strategy.select(request, ranked, COUNTER)
        general = layered_spec.select(request, list(ranked), COUNTER, keep_last=3)
        assert _encoded(fast) == _encoded(general)
        assert list(fast.decisions) == list(general.decisions)
        applied.update(general.metadata.strategies_applied)
    assert {
        "artifact:latest_per_source",
        "tool_log:dedupe",
        "conversation:keep_last_3",
        "evict:L2",
        "evict:L1",
        "evict:over_budget",
    } <= applied
