"""The inspector's "why" (issue 17 items 1 and 2) over a ledger the real engine wrote: each
decision's tier, score and score parts against the pure scoring function on the recorded
request, the budget a build packed to, the marginal item of a drop, item sorting and filters
(400 on a bad value), and the prompt of each build re-derived from the log, segment by
segment, equal to the prompt the engine's BuildResult had."""

from __future__ import annotations

import html as html_lib
import math
import re
from collections.abc import Callable, Iterator
from datetime import UTC
from pathlib import Path
from urllib.parse import quote

import pytest
from starlette.testclient import TestClient

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.cli.inspect import read_states
from ctxledger.adapters.clock import SteppingClock
from ctxledger.adapters.engine import EngineSettings
from ctxledger.adapters.ledger import open_ledger
from ctxledger.adapters.tokens import counter_named
from ctxledger.adapters.web import create_app
from ctxledger.domain import events as ev
from ctxledger.domain.model import Item, Layer, Source
from ctxledger.domain.packing import priority_tier
from ctxledger.domain.prompt import SEGMENT_ORDER
from ctxledger.domain.render import render_anthropic
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.retrieval import ROLE_WEIGHTS, score_item
from ctxledger.projections.pool import Pool
from tests.web_store import AGENT, EngineStore, build_engine_store, copy_engine_store

TOKEN = "test-token-0123456789abcdef"
PARTS = ("overlap", "recency", "role", "phase", "task", "confidence", "durability", "relevance")


@pytest.fixture(scope="module")
def template_store(tmp_path_factory: pytest.TempPathFactory) -> EngineStore:
    return build_engine_store(tmp_path_factory.mktemp("why") / "ledger.db")


@pytest.fixture
def store(template_store: EngineStore, tmp_path: Path) -> EngineStore:
    return copy_engine_store(template_store, tmp_path)


@pytest.fixture
def client(store: EngineStore) -> Iterator[TestClient]:
    app = create_app(store.url, token=TOKEN, catalog=store.catalog)
    with TestClient(app, follow_redirects=False) as c:
        yield c


def recorded(store: EngineStore) -> list[ev.Event]:
    with open_ledger(store.url) as ledger:
        return [r.event for r in ledger.read_all()]


def pool_items(store: EngineStore) -> dict[str, Item]:
    with open_ledger(store.url) as ledger:
        pool: Pool = read_states(ledger).pool
    return dict(pool.by_agent[AGENT].items)


def builds_of(
    store: EngineStore, generation: int
) -> list[tuple[BuildRequest, ev.ContextPackBuilt]]:
    """(recorded request, ContextPackBuilt) of each build that landed in *generation*."""
    events = recorded(store)
    started = {e.pack_id: e for e in events if isinstance(e, ev.ContextBuildingStarted)}
    out = []
    for e in events:
        if isinstance(e, ev.ContextPackBuilt) and e.generation == generation:
            request = started[e.pack_id].request
            assert request is not None
            out.append((request, e))
    return out


def row_of(html: str, item_id: str) -> str:
    start = html.index(f'<tr data-item-id="{item_id}"')
    return html[start : html.index("</tr>", start)]


def parts_on_page(row: str) -> dict[str, str]:
    return dict(re.findall(r'data-part="([a-z]+)">([^<]*)<', row))


def documented_parts(item: Item, request: BuildRequest) -> dict[str, float]:
    """The parts the scoring function documents, computed here from the item's and the
    request's own fields (docs/strategies.md); overlap is the remainder of the total."""
    recency = 0.0
    if item.observed_at is not None:
        age_h = (request.now - item.observed_at.astimezone(UTC)).total_seconds() / 3600.0
        recency = 1.0 / (1.0 + age_h / 24.0) if age_h > 0 else 1.0
    phase = 0.0
    if request.phase and item.phase:
        phase = 0.25 if item.phase == request.phase else -1.0
    parts = {
        "recency": recency,
        "role": ROLE_WEIGHTS.get(request.role.lower(), {}).get(item.source, 0.0),
        "phase": phase,
        "task": 1.5 if request.task and item.task == request.task else 0.0,
        "confidence": 0.5 * min(1.0, max(0.0, item.confidence)),
        "durability": 0.5 * int(item.durability) / 2.0,
        "relevance": 0.5 * min(1.0, max(0.0, item.relevance)),
    }
    total = score_item(item, request)
    parts["overlap"] = total - sum(parts.values())
    parts["score"] = total
    return parts


def decided_in(store: EngineStore, generation: int) -> dict[str, tuple[BuildRequest, str]]:
    """Item id → (request, action) of the build that last decided it in *generation*."""
    out: dict[str, tuple[BuildRequest, str]] = {}
    for request, built in builds_of(store, generation):
        for d in built.decisions:
            out[d.item_id] = (request, d.action)
    return out


def test_score_parts_of_an_included_and_a_dropped_item_equal_the_scoring_function(
    client: TestClient, store: EngineStore
) -> None:
    items = pool_items(store)
    checked: set[str] = set()
    for generation in (1, 2, 3):
        page = client.get(f"/agents/{AGENT}/generations/{generation}").text
        for item_id, (request, action) in decided_in(store, generation).items():
            item = items[item_id]
            shown = parts_on_page(row_of(page, item_id))
            expected = documented_parts(item, request)
            assert shown["tier"] == str(priority_tier(item))
            assert shown["score"] == f"{expected['score']:.3f}"
            for name in PARTS:
                assert math.isclose(float(shown[name]), expected[name], abs_tol=0.0015), (
                    item_id,
                    name,
                )
            assert math.isclose(
                sum(float(shown[n]) for n in PARTS), expected["score"], abs_tol=0.01
            )
            checked.add("dropped" if action == "dropped" else "included")
    assert checked == {"included", "dropped"}


def test_the_overlap_part_moves_with_the_request_words(
    client: TestClient, store: EngineStore
) -> None:
    """The tool logs mention the task's words, the hypothesis does not: overlap is not a
    constant the page could make up."""
    page = client.get(f"/agents/{AGENT}/generations/1").text
    decided = decided_in(store, 1)
    items = pool_items(store)
    overlaps = {
        i: float(parts_on_page(row_of(page, i))["overlap"])
        for i in decided
        if items[i].source is Source.TOOL_LOG or i == store.hypothesis
    }
    assert overlaps[store.hypothesis] == 0.0
    assert any(v > 0.5 for i, v in overlaps.items() if i != store.hypothesis)


def test_a_drop_names_the_last_item_that_fit_in_packing_order(
    client: TestClient, store: EngineStore
) -> None:
    items = pool_items(store)
    seen = 0
    for generation in (1, 2, 3):
        page = client.get(f"/agents/{AGENT}/generations/{generation}").text
        for request, built in builds_of(store, generation):
            kept = [d for d in built.decisions if d.action != "dropped"]
            last = max(
                kept,
                key=lambda d: (
                    priority_tier(items[d.item_id]),
                    -score_item(items[d.item_id], request),
                    d.item_id,
                ),
            )
            for d in built.decisions:
                if d.action != "dropped":
                    assert 'data-testid="marginal"' not in row_of(page, d.item_id)
                    continue
                row = row_of(page, d.item_id)
                assert f'data-marginal="{last.item_id}"' in row
                assert f"<span data-marginal-tokens>{last.tokens_after}</span>" in row
                seen += 1
    assert seen > 0


def test_each_build_shows_the_budget_it_packed_to(client: TestClient, store: EngineStore) -> None:
    events = recorded(store)
    started = {e.pack_id: e for e in events if isinstance(e, ev.ContextBuildingStarted)}
    gens: dict[int, list[ev.ContextPackBuilt]] = {}
    for e in events:
        if isinstance(e, ev.ContextPackBuilt):
            gens.setdefault(e.generation, []).append(e)
    for generation, built in gens.items():
        page = client.get(f"/agents/{AGENT}/generations/{generation}").text
        table = page.split('data-testid="builds"', 1)[1].split("</table>", 1)[0]
        for e in built:
            row = table[table.index(f'data-pack-id="{e.pack_id}"') :].split("</tr>", 1)[0]
            pack_budget = e.budget_limit - e.reserved
            assert f'data-testid="pack-budget">{pack_budget}<' in row
            s = started[e.pack_id]
            if s.generation != e.generation:  # a rebuild: below the watermark
                target = int(pack_budget * s.watermark)
                assert f'data-testid="packed-to">{target}<' in row
                assert target < pack_budget
    # the rebuild of generation 2 is one of them
    assert any(started[e.pack_id].generation == 1 for e in gens[2])


def test_sorting_orders_each_section_by_the_column(client: TestClient, store: EngineStore) -> None:
    items = pool_items(store)
    decided = decided_in(store, 2)
    for direction in ("asc", "desc"):
        page = client.get(f"/agents/{AGENT}/generations/2?sort=score&dir={direction}").text
        for section in ("included", "dropped"):
            table = page.split(f'data-testid="{section}-items"', 1)[1].split("</table>", 1)[0]
            ids = re.findall(r'<tr data-item-id="([^"]+)"', table)
            scores = [score_item(items[i], decided[i][0]) for i in ids]
            assert scores == sorted(scores, reverse=direction == "desc")
            assert len(ids) > 1
    page = client.get(f"/agents/{AGENT}/generations/2?sort=id&dir=desc").text
    table = page.split('data-testid="included-items"', 1)[1].split("</table>", 1)[0]
    ids = re.findall(r'<tr data-item-id="([^"]+)"', table)
    assert ids == sorted(ids, reverse=True)
    # the column header of the sorted column flips the direction, keeping the filters
    page = client.get(f"/agents/{AGENT}/generations/2?sort=tokens&dir=asc&layer=L0").text
    assert "?sort=tokens&amp;dir=desc&amp;layer=L0" in page


@pytest.mark.parametrize(
    ("query", "keep"),
    [
        ("fate=dropped", lambda v, d: d == "dropped"),
        ("fate=included", lambda v, d: d == "included"),
        ("layer=L0", lambda v, d: v.layer is Layer.L0),
        ("source=test_result", lambda v, d: v.source is Source.TEST_RESULT),
        ("flag=pinned", lambda v, d: v.pinned),
    ],
)
def test_filters_keep_only_the_matching_items(
    client: TestClient, store: EngineStore, query: str, keep: Callable[[Item, str], bool]
) -> None:
    with open_ledger(store.url) as ledger:
        gen = read_states(ledger).generations.by_agent[AGENT].generation(2)
    assert gen is not None
    items = pool_items(store)
    expected = sorted(i for i, d in gen.decisions.items() if keep(items[i], d.action))
    page = client.get(f"/agents/{AGENT}/generations/2?{query}").text
    shown = sorted(re.findall(r'<tr data-item-id="([^"]+)"', page))
    assert shown == expected
    assert expected  # each filter matches something in this ledger


@pytest.mark.parametrize(
    "query",
    [
        "sort=bogus",
        "sort=score&dir=up",
        "dir=desc",
        "sort=score&sort=tier",
        "fate=gone",
        "fate=%E2%91%A0",
        "layer=L9",
        "layer=l0",
        "source=nowhere",
        "flag=failure",
        "fate=dropped&fate=included",
    ],
)
def test_bad_sort_or_filter_values_are_a_400(client: TestClient, query: str) -> None:
    r = client.get(f"/agents/{AGENT}/generations/2?{query}")
    assert r.status_code == 400
    assert "<script" not in r.text.lower()
    assert r.headers["x-frame-options"] == "DENY"


def segment_texts(page: str) -> dict[str, str]:
    found = re.findall(
        r'<section class="segment" id="segment-([a-z]+)"[^>]*>.*?(?:<pre class="segment-text"'
        r' data-testid="segment-text">(.*?)</pre>|<p class="muted">empty</p>)',
        page,
        flags=re.S,
    )
    return {name: html_lib.unescape(text) for name, text in found}


def test_the_prompt_view_concatenates_to_the_engine_prompt(
    client: TestClient, store: EngineStore
) -> None:
    assert len(store.prompts) == 4
    with open_ledger(store.url) as ledger:
        counter_name = next(
            r.event.counter
            for r in ledger.read_all()
            if isinstance(r.event, ev.ContextBuildingStarted)
        )
    counter = counter_named(counter_name)
    assert counter is not None
    for pack_id, prompt in store.prompts:
        r = client.get(f"/agents/{AGENT}/builds/{quote(pack_id, safe='')}")
        assert r.status_code == 200
        assert 'data-testid="not-rederived"' not in r.text
        texts = segment_texts(r.text)
        assert list(texts) == [s.value for s in SEGMENT_ORDER]
        assert "".join(texts.values()) == prompt.text
        for segment in SEGMENT_ORDER:
            assert texts[segment.value] == prompt.segments[segment]
            row = r.text.split(f'<tr data-segment="{segment.value}">', 1)[1].split("</tr>", 1)[0]
            tokens = counter.count(prompt.segments[segment]) if prompt.segments[segment] else 0
            assert f'data-testid="segment-tokens">{tokens}<' in row
        # the breakpoints are where the Anthropic renderer puts them for the engine's prompt
        rendered = render_anthropic(prompt, model="claude-sonnet", max_tokens=1, counter=counter)
        marked = [b for b in rendered.request.get("system", []) if "cache_control" in b]
        shown = re.findall(r'data-testid="breakpoint">yes<', r.text)
        assert len(shown) == len(marked)


def test_the_prompt_view_breakpoints_follow_the_renderer_on_a_long_prefix(
    store: EngineStore,
) -> None:
    """A SESSION above the model's minimum cacheable length gets a breakpoint on the page
    exactly when the renderer gives the engine's prompt one."""
    engine = open_engine(
        open_ledger(store.url), clock=SteppingClock(), settings=EngineSettings(session_id="web")
    )
    try:
        engine.record(
            AGENT,
            "Constraint: " + "keep the public session API stable across releases. " * 300,
            layer=Layer.L1,
            source=Source.STEERING_NOTE,
            pinned=True,
        )
        result = engine.rebuild(AGENT, reason="long constraint")
        assert result is not None
        pack_id, prompt = result.pack.id, result.prompt
        counter = engine.counter
    finally:
        engine.close()
    app = create_app(store.url, token=TOKEN)
    with TestClient(app) as c:
        page = c.get(f"/agents/{AGENT}/builds/{quote(pack_id, safe='')}").text
    assert "".join(segment_texts(page).values()) == prompt.text
    rendered = render_anthropic(prompt, model="claude-sonnet", max_tokens=1, counter=counter)
    blocks = iter(rendered.request.get("system", []))
    for segment in SEGMENT_ORDER:
        if not prompt.segments[segment]:
            continue
        row = page.split(f'<tr data-segment="{segment.value}">', 1)[1].split("</tr>", 1)[0]
        marked = "cache_control" in next(blocks)
        assert ('data-testid="breakpoint">yes<' in row) == marked
    assert 'data-testid="breakpoint">yes<' in page


def test_a_prompt_with_an_unrecorded_user_input_says_it_cannot_be_rederived(
    store: EngineStore,
) -> None:
    engine = open_engine(
        open_ledger(store.url), clock=SteppingClock(), settings=EngineSettings(session_id="web")
    )
    try:
        engine.record(AGENT, "pytest -q → 2 failed", layer=Layer.L0, source=Source.TEST_RESULT)
        result = engine.build(AGENT, latest_user_input="please also check the refresh path")
    finally:
        engine.close()
    app = create_app(store.url, token=TOKEN)
    with TestClient(app) as c:
        page = c.get(f"/agents/{AGENT}/builds/{quote(result.pack.id, safe='')}").text
    assert 'data-testid="not-rederived"' in page
    assert "latest user input is not recorded" in page
    assert 'data-testid="segment-text"' not in page


def test_the_prompt_view_names_what_changed_since_the_previous_build(
    client: TestClient, store: EngineStore
) -> None:
    events = recorded(store)
    append = next(e for e in events if isinstance(e, ev.ContextPackBuilt) and e.changed_segment)
    page = client.get(f"/agents/{AGENT}/builds/{quote(append.pack_id, safe='')}").text
    changed = page.split('data-testid="changed">', 1)[1].split("</p>", 1)[0]
    assert f'href="#segment-{append.changed_segment}"' in changed
    assert f'id="segment-{append.changed_segment}"' in page
    # the generation page links each build's changed segment to it
    gen = client.get(f"/agents/{AGENT}/generations/{append.generation}").text
    assert f"{quote(append.pack_id, safe='')}#segment-{append.changed_segment}" in gen


@pytest.mark.parametrize("pack", ["nope", "primary-1%2Fg9%2Fv1"])
def test_an_unknown_build_is_a_404(client: TestClient, pack: str) -> None:
    r = client.get(f"/agents/{AGENT}/builds/{pack}")
    assert r.status_code == 404
    assert client.get(f"/agents/nobody/builds/{pack}").status_code == 404


def test_an_unexpected_miss_links_to_the_builds_and_their_changed_segment(
    store: EngineStore,
) -> None:
    engine = open_engine(
        open_ledger(store.url), clock=SteppingClock(), settings=EngineSettings(session_id="web")
    )
    try:
        engine.record(AGENT, "pytest -q → 3 failed", layer=Layer.L0, source=Source.TEST_RESULT)
        result = engine.build(AGENT)
        assert result.kind == "append"
        engine.report_usage(
            AGENT,
            {
                "input_tokens": 400,
                "cache_read_input_tokens": 0,
                "cache_creation_input_tokens": 0,
                "output_tokens": 5,
            },
        )
    finally:
        engine.close()
    built = [e for e in recorded(store) if isinstance(e, ev.ContextPackBuilt)][-1]
    assert built.pack_id == result.pack.id
    assert built.changed_segment
    app = create_app(store.url, token=TOKEN)
    with TestClient(app) as c:
        cache = c.get("/cache").text
        link = f'/agents/{AGENT}/generations/{built.generation}#builds"'
        row = cache.split(f'<tr data-generation="{built.generation}">', 1)[1].split("</tr>", 1)[0]
        assert link in row
        assert f'data-miss-segment="{built.changed_segment}"' in row
        gen = c.get(f"/agents/{AGENT}/generations/{built.generation}").text
        target = f"/builds/{quote(built.pack_id, safe='')}#segment-{built.changed_segment}"
        assert target in gen
        page = c.get(f"/agents/{AGENT}/builds/{quote(built.pack_id, safe='')}").text
    assert f'id="segment-{built.changed_segment}"' in page
    assert "".join(segment_texts(page).values()) == result.prompt.text
