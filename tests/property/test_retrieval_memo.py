"""Retrieval's memo of each item's time-independent score part equals computing it afresh.

``_scores`` keeps, per (request terms, task, role, phase) and item object, the part of the
score that does not depend on the request's time, and adds recency, role and phase to it. Over
random pools and random sequences of requests — the same query at other times, other
queries, pools that share item objects — every score equals the one computed with every memo
cleared, float for float, and the retrieval order is the same. ``retrieve`` adds the parts
from per-pool-version arrays in one comprehension and sorts starting from its last order over
the same pool and query: the same scores, float for float, and the same order."""

from __future__ import annotations

from datetime import timedelta

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from ctxledger.domain.memo import clear_caches
from ctxledger.domain.model import Item
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.retrieval import _scores, retrieve
from tests.property.strategies_items import PHASES, ROLES, TASKS, build_requests, item_pools


@st.composite
def request_sequences(draw: st.DrawFn) -> list[BuildRequest]:
    first = draw(build_requests())
    out = [first]
    for _ in range(draw(st.integers(min_value=1, max_value=5))):
        step = draw(st.sampled_from(["later", "other phase", "other role", "other task", "new"]))
        last = out[-1]
        if step == "later":  # the same query later (or earlier)
            shift = timedelta(minutes=draw(st.integers(min_value=-600, max_value=6000)))
            out.append(msgspec.structs.replace(last, now=last.now + shift))
        elif step == "other phase":  # the same terms with one part of the key changed
            out.append(msgspec.structs.replace(last, phase=draw(st.sampled_from(PHASES))))
        elif step == "other role":
            out.append(msgspec.structs.replace(last, role=draw(st.sampled_from(ROLES))))
        elif step == "other task":
            out.append(msgspec.structs.replace(last, task=draw(st.sampled_from(TASKS))))
        else:
            out.append(draw(build_requests()))
    return out


@given(pool=item_pools(max_size=25), requests=request_sequences(), split=st.integers(0, 25))
def test_memoised_scores_equal_scores_computed_afresh(
    pool: list[Item], requests: list[BuildRequest], split: int
) -> None:
    pools = [pool, pool[split:] + pool[:split], pool[: max(1, split)]]
    seen = []
    for r in requests:
        for p in pools:
            ranked = retrieve(r, p)  # the pool version's arrays, and its last order
            seen.append((_scores(r, p), ranked.scores, [s.item.id for s in ranked]))
    fresh = []
    for r in requests:
        for p in pools:
            clear_caches()
            scores = _scores(r, p)
            clear_caches()
            fresh.append((scores, scores, [s.item.id for s in retrieve(r, p)]))
    assert seen == fresh
