"""A verified finding stands in for the hypotheses with its exact text (issue 39).

Seed 000: "finding verification updates only the exact finding identity" — and a prompt must
never show the unverified version of what was verified. When an unverified finding or
hypothesis has the same text as a verified finding, the packer drops the hypothesis
``duplicate`` before packing and the verified finding ranks where the better of them did;
a kept hypothesis (the latest step) keeps the finding instead. Every strategy, over the
product's packers and the specification in ``tests/oracles``.
"""

from __future__ import annotations

from datetime import timedelta

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from ctxledger.domain.model import Item, Layer, Source
from ctxledger.domain.packing import DUPLICATE, PackResult
from ctxledger.domain.ranked_pack import pack
from ctxledger.domain.request import BuildRequest, Scope
from ctxledger.domain.retrieval import retrieve
from ctxledger.domain.strategies import BASELINES, STRATEGIES, get_strategy
from ctxledger.domain.strategies.layered import LayeredStrategy
from ctxledger.domain.tokens import EstimatingCounter
from tests.oracles import layered_spec, packing_spec
from tests.property.strategies_items import NOW, scopes

COUNTER = EstimatingCounter()
_TEXTS = ("the cache key ignores the tenant", "login fails on an expired token", "x " * 80)
_FINDING_SOURCES = (Source.WORKER_FINDING, Source.UNVERIFIED_HYPOTHESIS, Source.VERIFIED_FACT)


def _encoded(res: PackResult) -> bytes:
    return msgspec.json.encode(res)


@st.composite
def finding_pools(draw: st.DrawFn) -> tuple[list[Item], BuildRequest]:
    """Findings over three texts, verified or not, some grouped, pinned or in L1 (so a
    hypothesis may outrank its verified twin), other items beside them, and a request
    keeping some ids under some scope and budget."""
    pool: list[Item] = []
    for n in range(draw(st.integers(1, 14))):
        source = draw(st.sampled_from((*_FINDING_SOURCES, Source.TOOL_LOG)))
        verified = source is Source.VERIFIED_FACT or (
            source is Source.WORKER_FINDING and draw(st.booleans())
        )
        pool.append(
            Item(
                id=f"f{n:02d}",
                layer=draw(st.sampled_from((Layer.L1, Layer.L2, Layer.L3))),
                source=source,
                content=draw(st.sampled_from(_TEXTS)),
                verified=verified,
                relevance=draw(st.floats(0, 1)),
                observed_at=NOW - timedelta(minutes=draw(st.integers(0, 90))),
                group=draw(st.sampled_from(("", "", "", "step-1"))),
                pinned=draw(st.integers(0, 9)) == 0,
            )
        )
    keep = tuple(draw(st.lists(st.sampled_from([it.id for it in pool]), max_size=3)))
    scope = draw(scopes()) if draw(st.integers(0, 3)) == 0 else Scope()
    request = BuildRequest(
        agent_id="a", budget=draw(st.integers(1, 400)), now=NOW, keep_ids=keep, scope=scope
    )
    return pool, request


def _hypothesis_shown_beside_its_finding(pool: list[Item], res: PackResult, scope: Scope) -> bool:
    """Whether *res* includes an ungrouped, unpinned unverified finding while an ungrouped
    verified finding with its text is in the pool and not excluded by the scope."""
    shown = {it.id for it in res.items}
    excluded_layers = set(scope.layers)
    excluded_sources = set(scope.sources)

    def allowed(it: Item) -> bool:
        if excluded_layers and it.layer not in excluded_layers:
            return False
        if excluded_sources and it.source not in excluded_sources:
            return False
        return not (scope.exclude_project_memory and it.layer is Layer.L3)

    verified_texts = {
        it.content
        for it in pool
        if it.verified and not it.group and it.source is not Source.UNVERIFIED_HYPOTHESIS
    }
    # The finding that stands in is the smallest id among the verified ones with the text.
    stand_in = {
        text: min(it.id for it in pool if it.content == text and it.verified and not it.group)
        for text in verified_texts
    }
    by_id = {it.id: it for it in pool}
    return any(
        iid in shown
        for iid, it in by_id.items()
        if not it.verified
        and not it.group
        and not it.pinned
        and it.source in (Source.WORKER_FINDING, Source.UNVERIFIED_HYPOTHESIS)
        and it.content in stand_in
        and allowed(by_id[stand_in[it.content]])
    )


@given(finding_pools(), st.sampled_from(sorted(STRATEGIES)))
def test_no_strategy_shows_a_hypothesis_beside_the_finding_that_verified_it(
    case: tuple[list[Item], BuildRequest], name: str
) -> None:
    pool, request = case
    request = msgspec.structs.replace(request, strategy=name)
    ranked = retrieve(request, pool)
    res = get_strategy(name).select(request, ranked, COUNTER)
    if name not in BASELINES:  # the baselines are the comparison, not the engine's packing
        assert not _hypothesis_shown_beside_its_finding(pool, res, request.scope)
    assert _encoded(get_strategy(name).select(request, list(ranked), COUNTER)) == _encoded(res)


@given(finding_pools(), st.booleans())
def test_the_stand_in_rule_meets_the_specification(
    case: tuple[list[Item], BuildRequest], chronological: bool
) -> None:
    pool, request = case
    ranked = retrieve(request, pool)
    made = pack(request, ranked, COUNTER, strategy_name="s", chronological=chronological)
    spec = packing_spec.pack(
        request, list(ranked), COUNTER, strategy_name="s", chronological=chronological
    )
    assert _encoded(made) == _encoded(spec)
    assert list(made.decisions) == list(spec.decisions)
    layered = LayeredStrategy().select(request, ranked, COUNTER)
    assert _encoded(layered) == _encoded(layered_spec.select(request, list(ranked), COUNTER))


def test_a_kept_hypothesis_shows_the_verified_finding_with_its_text() -> None:
    """The issue's case: a finding verified earlier, then a worker reports the same text
    again, unverified, in the latest step (kept, and newer, so it ranks first)."""
    text = "the cache key ignores the tenant"
    finding = Item(
        id="finding-1", layer=Layer.L2, source=Source.VERIFIED_FACT, content=text,
        verified=True, observed_at=NOW - timedelta(minutes=30),
    )  # fmt: skip
    again = Item(
        id="hypothesis-9", layer=Layer.L1, source=Source.UNVERIFIED_HYPOTHESIS, content=text,
        observed_at=NOW, relevance=1.0,
    )  # fmt: skip
    other = Item(id="log-1", layer=Layer.L2, source=Source.TOOL_LOG, content="pytest -q\n1 passed")
    request = BuildRequest(agent_id="a", budget=500, now=NOW, keep_ids=("hypothesis-9",))
    for name in sorted(STRATEGIES):
        if name in BASELINES:
            continue  # the baselines are the comparison, not the engine's packing
        req = msgspec.structs.replace(request, strategy=name)
        res = get_strategy(name).select(req, retrieve(req, [finding, again, other]), COUNTER)
        shown = [it.id for it in res.items]
        assert "finding-1" in shown, name
        assert "hypothesis-9" not in shown, name
        assert res.decisions["hypothesis-9"].reason == DUPLICATE, name
        assert "dedupe:verified" in res.metadata.strategies_applied, name


def test_a_hypothesis_stays_when_the_scope_excludes_its_finding() -> None:
    text = "login fails on an expired token"
    finding = Item(id="f", layer=Layer.L3, source=Source.VERIFIED_FACT, content=text, verified=True)
    hypothesis = Item(id="h", layer=Layer.L2, source=Source.WORKER_FINDING, content=text)
    request = BuildRequest(
        agent_id="a", budget=500, now=NOW, scope=Scope(exclude_project_memory=True)
    )
    res = pack(request, retrieve(request, [finding, hypothesis]), COUNTER, strategy_name="s")
    assert [it.id for it in res.items] == ["h"]
    assert res.decisions["f"].reason == "excluded_by_scope"
