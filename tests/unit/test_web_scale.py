"""The web inspector at scale and for reading: whole item content behind <details>, condensed
provenance, whole ids, pagination (and its 400s), collapsed sections, thinned chart labels,
every layer in the composition, "no calls", agent ids of any characters, the parent → worker
tree, and a 2,000-item, 200-generation agent whose pages stay under 200 KB and 300 ms."""

from __future__ import annotations

import html as htmllib
import itertools
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote

import msgspec
import pytest
from starlette.testclient import TestClient

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.cli.inspect import read_states
from ctxledger.adapters.clock import SteppingClock
from ctxledger.adapters.engine import ContextEngine, EngineSettings
from ctxledger.adapters.ledger import open_ledger
from ctxledger.adapters.web import create_app
from ctxledger.adapters.web.charts import MAX_LABELS, grouped_chart
from ctxledger.adapters.web.views import CONTENT_LIMIT, DEFAULT_PER
from ctxledger.domain import events as ev
from ctxledger.domain.model import AgentIdentity, Generation, Layer, Source
from ctxledger.projections.generations import Generations

TOKEN = "scale-token-0123456789abcdef"
LEAD = "lead"
ODD_IDS = ("team/worker 1", "a%2Fb", "ünï?#&=+", "x/generations/3", "sp ace/..")
LONG_ID = "it_" + "0123456789abcdef" * 4
MULTILINE = "line one <b>bold?</b>\n" + "\n".join(f"  detail {i}: " + "x" * 40 for i in range(12))
HUGE = "".join(f"row {i:05d} " for i in range(CONTENT_LIMIT // 5))
BIG = "big/agent"
BIG_ITEMS = 2000
BIG_GENERATIONS = 200
MAX_BYTES = 200 * 1024
TARGET_SECONDS = 0.300
"""The issue's server-time target per page: printed beside each page, not asserted (timed
asserts flake on a shared 2-core machine; performance goals live in benchmarks)."""
PATHOLOGICAL_SECONDS = 3.0
"""What the test does assert: ten times the target, so a page that stops scaling fails."""


def url(agent_id: str) -> str:
    return "/agents/" + quote(agent_id, safe="")


@dataclass(frozen=True)
class Mixed:
    url: str
    path: Path
    multiline: str
    huge: str
    foreign: str
    plain: str


def engine_at(path: Path) -> ContextEngine:
    return open_engine(
        open_ledger(f"sqlite:///{path}"),
        clock=SteppingClock(),
        settings=EngineSettings(session_id="scale"),
    )


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Mixed:
    """A lead with workers (one with a grand-worker), an orphan, agents with odd ids, and
    items to read: multi-line, over the content limit, from another agent's task, long id."""
    path = tmp_path_factory.mktemp("mixed") / "ledger.db"
    engine = engine_at(path)
    try:
        for agent_id, parent in (
            (LEAD, ""),
            ("lead/w1", LEAD),
            ("lead/w2", LEAD),
            ("lead/w1/g", "lead/w1"),
            ("orphan", "gone"),
            *((i, "") for i in ODD_IDS),
        ):
            engine.register_agent(
                AgentIdentity(
                    agent_id=agent_id, role="primary", task="the task", parent=parent, budget=900
                )
            )
        multiline = engine.record(LEAD, MULTILINE, layer=Layer.L1, source=Source.TEST_RESULT)
        huge = engine.record(LEAD, HUGE, layer=Layer.L0, source=Source.TOOL_LOG)
        made = engine.make_item(LEAD, "a finding from the worker", layer=Layer.L2)
        foreign = engine.record(
            LEAD, msgspec.structs.replace(made, agent="lead/w1", task="another task")
        )
        plain = engine.record(
            LEAD, "short and plain", layer=Layer.L1, source=Source.TEST_RESULT, item_id=LONG_ID
        )
        engine.build(LEAD)
        for agent_id in ODD_IDS:
            engine.record(
                agent_id, f"seen by {agent_id}", layer=Layer.L1, source=Source.TEST_RESULT
            )
            engine.build(agent_id)
    finally:
        engine.close()
    return Mixed(
        url=f"sqlite:///{path}",
        path=path,
        multiline=multiline.id,
        huge=huge.id,
        foreign=foreign.id,
        plain=plain.id,
    )


@pytest.fixture
def client(mixed: Mixed) -> Iterator[TestClient]:
    with TestClient(create_app(mixed.url, token=TOKEN), follow_redirects=False) as c:
        yield c


def row_of(page: str, item_id: str) -> str:
    found = re.search(rf'<tr data-item-id="{re.escape(item_id)}".*?</tr>', page, re.S)
    assert found is not None, item_id
    return found.group(0)


# --- readable items ---------------------------------------------------------------------------


def test_multi_line_content_is_whole_behind_details(client: TestClient, mixed: Mixed) -> None:
    page = client.get(f"{url(LEAD)}/generations/1").text
    row = row_of(page, mixed.multiline)
    found = re.search(r"<details[^>]*><summary>(.*?)</summary><pre>(.*?)</pre>", row, re.S)
    assert found is not None
    assert htmllib.unescape(found.group(2)) == MULTILINE  # every line, escaped, no "…"
    assert "<b>bold" not in row


def test_content_past_the_limit_says_how_much_more_and_the_item_page_shows_it_all(
    client: TestClient, mixed: Mixed
) -> None:
    row = row_of(client.get(f"{url(LEAD)}/generations/1").text, mixed.huge)
    shown = re.search(r"<pre>(.*?)</pre>", row, re.S)
    assert shown is not None
    assert htmllib.unescape(shown.group(1)) == HUGE[:CONTENT_LIMIT]
    assert f"… {len(HUGE) - CONTENT_LIMIT} more characters" in row
    link = f'{url(LEAD)}/items/{mixed.huge}"'
    assert link in row
    item = client.get(link[:-1])
    assert item.status_code == 200
    whole = re.search(r'data-testid="item-content">(.*?)</pre>', item.text, re.S)
    assert whole is not None
    assert htmllib.unescape(whole.group(1)) == HUGE


def test_provenance_names_agent_and_task_only_when_they_differ(
    client: TestClient, mixed: Mixed
) -> None:
    page = client.get(f"{url(LEAD)}/generations/1").text
    own = row_of(page, mixed.multiline)
    assert "<dt>agent</dt>" not in own
    assert "<dt>task</dt>" not in own
    other = row_of(page, mixed.foreign)
    assert "<dt>agent</dt><dd>lead/w1</dd>" in other
    assert "<dt>task</dt><dd>another task</dd>" in other


def test_a_long_item_id_is_shown_whole(client: TestClient, mixed: Mixed) -> None:
    assert len(mixed.plain) > 60
    row = row_of(client.get(f"{url(LEAD)}/generations/1").text, mixed.plain)
    assert f">{mixed.plain}</a></code>" in row
    assert "<details" not in row  # a one-line content needs no expanding


def test_an_unknown_item_is_a_404(client: TestClient) -> None:
    assert client.get(f"{url(LEAD)}/items/it_nothing").status_code == 404


# --- agent ids of any characters, the tree ----------------------------------------------------


def hrefs(page: str) -> set[str]:
    return {htmllib.unescape(h) for h in re.findall(r'href="([^"]+)"', page)}


@pytest.mark.parametrize("agent_id", ODD_IDS)
def test_agent_ids_of_any_characters_round_trip_through_links_and_controls(
    client: TestClient, mixed: Mixed, agent_id: str
) -> None:
    index = client.get("/").text
    assert url(agent_id) in hrefs(index)
    page = client.get(url(agent_id))
    assert page.status_code == 200
    assert f"<h1>{htmllib.escape(agent_id, quote=False)}</h1>" in page.text
    gen_url = f"{url(agent_id)}/generations/1"
    assert gen_url in hrefs(page.text)
    gen = client.get(gen_url)
    assert gen.status_code == 200
    assert client.get(f"{url(agent_id)}/diff?from=1&to=1").status_code == 200
    [item_id] = re.findall(r'<tr data-item-id="([^"]+)"', gen.text)
    with open_ledger(mixed.url) as ledger:
        end = ledger.max_position()
    r = client.post(
        f"{url(agent_id)}/control",
        data={"csrf_token": TOKEN, "action": "pin", "item_id": item_id, "next": gen_url},
    )
    assert r.status_code == 303
    assert r.headers["location"] == gen_url
    with open_ledger(mixed.url) as ledger:
        pins = [r.event for r in ledger.read_all(after=end)]
    assert len(pins) == 1
    assert isinstance(pins[0], ev.ItemPinned)
    assert pins[0].agent_id == agent_id


def test_a_path_that_is_not_utf8_or_has_extra_segments_is_a_404(client: TestClient) -> None:
    for path in ("/agents/%FF", f"{url(LEAD)}/generations/1/x", f"{url(LEAD)}/nothing"):
        assert client.get(path).status_code == 404, path
    assert client.get(f"{url(LEAD)}/control").status_code == 405


class _Tree(HTMLParser):
    """The parent of each ``li[data-agent-id]`` in the agents tree."""

    def __init__(self) -> None:
        super().__init__()
        self.inside = False
        self.stack: list[str] = []
        self.parent: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("data-testid") == "agent-tree":
            self.inside = True
        if self.inside and tag == "li":
            agent = a.get("data-agent-id") or ""
            self.parent[agent] = self.stack[-1] if self.stack else ""
            self.stack.append(agent)

    def handle_endtag(self, tag: str) -> None:
        if self.inside and tag == "li":
            self.stack.pop()
        if tag == "nav":
            self.inside = False


def test_the_agents_page_nests_workers_under_their_parent(client: TestClient) -> None:
    tree = _Tree()
    tree.feed(client.get("/").text)
    assert tree.parent["lead/w1"] == LEAD
    assert tree.parent["lead/w2"] == LEAD
    assert tree.parent["lead/w1/g"] == "lead/w1"
    assert tree.parent[LEAD] == ""
    assert tree.parent["orphan"] == ""
    assert set(tree.parent) == {LEAD, "lead/w1", "lead/w2", "lead/w1/g", "orphan", *ODD_IDS}


# --- composition and cache --------------------------------------------------------------------


def test_every_layer_is_in_the_composition_even_with_no_tokens(client: TestClient) -> None:
    page = client.get(f"{url(LEAD)}/generations/1").text
    svg = page.split('aria-label="tokens by layer"', 1)[1].split("</svg>", 1)[0]
    values = dict(re.findall(r'data-label="([^"]+)" data-value="(\d+)"', svg))
    assert {"L0", "L1", "L2", "L3", "L4"} <= set(values)
    assert values["L3"] == "0"
    assert values["L4"] == "0"
    assert int(values["L1"]) > 0


def test_a_generation_without_calls_says_so(client: TestClient) -> None:
    page = client.get(f"{url(LEAD)}/generations/1").text
    cache = re.search(r'data-testid="cache">(.*?)</dd>', page, re.S)
    assert cache is not None
    assert cache.group(1).startswith("no calls")
    assert "hit rate 0.0" not in page


# --- charts -----------------------------------------------------------------------------------


@pytest.mark.parametrize("count", [3, 25, 26, 101, 200, 1000])
def test_chart_labels_are_thinned_so_they_never_collide(count: int) -> None:
    labels = [f"g{n}" for n in range(1, count + 1)]
    chart = grouped_chart(labels, [("used", "#000", [1.0] * count)])
    xs = [x for x, _ in chart.categories]
    assert len(xs) <= MAX_LABELS
    widest = max(len(t) for _, t in chart.categories) * 6.5
    assert all(b - a >= widest for a, b in itertools.pairwise(xs))
    if count <= 10:
        assert [t for _, t in chart.categories] == labels
    assert chart.categories[0][1] == "g1"


# --- the big agent ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One agent, 2,000 items recorded in batches and 200 generations (a rebuild per
    batch), with a usage report on every other generation."""
    path = tmp_path_factory.mktemp("big") / "ledger.db"
    engine = engine_at(path)
    try:
        engine.register_agent(AgentIdentity(agent_id=BIG, role="primary", task="t", budget=2000))
        per_batch = BIG_ITEMS // BIG_GENERATIONS
        for g in range(BIG_GENERATIONS):
            items = [
                engine.make_item(
                    BIG,
                    f"item {n}: tool output line {n} " * 6 + f"\nsecond line of {n}",
                    layer=(Layer.L0, Layer.L1, Layer.L2)[n % 3],
                    source=Source.TOOL_LOG,
                )
                for n in range(g * per_batch, (g + 1) * per_batch)
            ]
            engine.record_many(BIG, items)
            if g == 0:
                engine.build(BIG)
            else:
                engine.rebuild(BIG, reason=f"step {g}")
            if g % 2:
                engine.report_usage(
                    BIG,
                    {
                        "input_tokens": 100,
                        "cache_read_input_tokens": 900,
                        "cache_creation_input_tokens": 10,
                        "output_tokens": 5,
                    },
                )
    finally:
        engine.close()
    return f"sqlite:///{path}"


def big_generations(store: str) -> tuple[Generation, ...]:
    with open_ledger(store) as ledger:
        gens: Generations = read_states(ledger).generations
    return gens.by_agent[BIG].generations


@pytest.fixture(scope="module")
def big_client(big: str) -> Iterator[TestClient]:
    with TestClient(create_app(big, token=TOKEN), follow_redirects=False) as c:
        yield c


BIG_PAGES = (
    "/",
    url(BIG),
    f"{url(BIG)}/generations/1",
    f"{url(BIG)}/generations/{BIG_GENERATIONS // 2}",
    f"{url(BIG)}/generations/{BIG_GENERATIONS}",
    f"{url(BIG)}/generations/{BIG_GENERATIONS}?page=40",
    f"{url(BIG)}/diff?from=1&to={BIG_GENERATIONS}",
    f"{url(BIG)}/diff",
    "/cache",
    "/memory",
)


def test_the_big_agent_has_the_sizes_the_bounds_are_for(big: str) -> None:
    gens = big_generations(big)
    assert len(gens) == BIG_GENERATIONS
    assert len(gens[-1].decisions) == BIG_ITEMS


def test_every_page_of_a_2000_item_200_generation_agent_is_small_and_fast(
    big_client: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each page under 200 KB; server time (TestClient in process, the read models already
    folded) printed against the 300 ms target and asserted only against a 10× bound; the
    first, cold request of each page is reported too."""
    started = time.perf_counter()
    big_client.get("/")  # fold the log once: the bound is for rendering a page
    fold_s = time.perf_counter() - started
    measured = []
    for path in BIG_PAGES:
        started = time.perf_counter()
        cold = big_client.get(path)
        cold_s = time.perf_counter() - started
        started = time.perf_counter()
        r = big_client.get(path)
        warm_s = time.perf_counter() - started
        assert cold.status_code == r.status_code == 200, path
        measured.append((path, len(r.content), cold_s, warm_s))
    with capsys.disabled():
        print(f"\n  first request (folds the whole log): {fold_s * 1000:.0f} ms")
        for path, size, cold_s, warm_s in measured:
            over = "  (over the 300 ms target)" if warm_s >= TARGET_SECONDS else ""
            print(
                f"  {size / 1024:6.1f} KB  cold {cold_s * 1000:5.0f} ms  "
                f"warm {warm_s * 1000:5.0f} ms  {path}{over}"
            )
    assert [p for p, size, _, _ in measured if size >= MAX_BYTES] == []
    assert [(p, round(w * 1000)) for p, _, _, w in measured if w >= PATHOLOGICAL_SECONDS] == []


def test_the_generation_pages_together_hold_every_item_once(
    big_client: TestClient, big: str
) -> None:
    last = big_generations(big)[-1]
    seen: list[str] = []
    per = 500
    pages = -(-len(last.decisions) // per)
    for page in range(1, pages + 1):
        html = big_client.get(
            f"{url(BIG)}/generations/{BIG_GENERATIONS}?page={page}&per={per}"
        ).text
        seen += re.findall(r'<tr data-item-id="([^"]+)"', html)
    assert sorted(seen) == sorted(last.decisions)
    first = big_client.get(f"{url(BIG)}/generations/{BIG_GENERATIONS}").text
    assert len(re.findall(r'<tr data-item-id="', first)) == DEFAULT_PER
    assert f"items 1–{DEFAULT_PER} of {BIG_ITEMS}" in first
    assert f'href="{url(BIG)}/generations/{BIG_GENERATIONS}?page=2" rel="next"' in first


def test_dropped_and_reshaped_sections_are_collapsed_with_their_counts(
    big_client: TestClient, big: str
) -> None:
    last = big_generations(big)[-1]
    dropped = sum(d.action == "dropped" for d in last.decisions.values())
    assert dropped > DEFAULT_PER  # the case the collapsing is for
    page = big_client.get(f"{url(BIG)}/generations/{BIG_GENERATIONS}?page=40").text
    section = re.search(r'<details class="section" data-testid="dropped-section"([^>]*)>', page)
    assert section is not None
    assert "open" not in section.group(1)
    assert f'data-testid="dropped-count">{dropped}<' in page


def test_the_timeline_is_paginated_and_its_chart_labels_thinned(big_client: TestClient) -> None:
    page = big_client.get(url(BIG)).text
    rows = re.findall(r'<tr data-generation="(\d+)"', page)
    assert rows == [str(n) for n in range(1, DEFAULT_PER + 1)]
    last = big_client.get(f"{url(BIG)}?page=4").text
    assert re.findall(r'<tr data-generation="(\d+)"', last)[-1] == str(BIG_GENERATIONS)
    svg = page.split('aria-label="tokens used and budget per generation"', 1)[1]
    labels = re.findall(
        r'<text class="tick"[^>]*text-anchor="middle">(g\d+)</text>', svg.split("</svg>")[0]
    )
    assert 2 <= len(labels) <= MAX_LABELS


@pytest.mark.parametrize(
    "query",
    [
        "page=0",
        "page=-1",
        "page=x",
        "page=%C2%B2",
        "page=1.5",
        "page=1&page=2",
        "per=0",
        "per=501",
        "per=%E2%91%A0",
        "page=999",  # past the last page
    ],
)
def test_malformed_paging_is_a_400(big_client: TestClient, query: str) -> None:
    for base in (url(BIG), f"{url(BIG)}/generations/{BIG_GENERATIONS}", "/cache"):
        if base == "/cache" and query == "page=999":
            continue  # the cache page shows each agent's last page for a page past it
        r = big_client.get(f"{base}?{query}")
        assert r.status_code == 400, (base, query)
        assert "content-security-policy" in r.headers
