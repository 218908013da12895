"""The web inspector's routes through Starlette's TestClient: pages match the read models,
controls append through the engine, and bad requests (404/400/403, CSRF) write nothing."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.cli.inspect import read_states
from ctxledger.adapters.ledger import open_ledger
from ctxledger.adapters.web import create_app
from ctxledger.adapters.web.access import access_for_bind
from ctxledger.adapters.web.app import display_url
from ctxledger.domain import events as ev
from ctxledger.domain.errors import InvalidInputError, StoreURLError
from ctxledger.domain.model import AgentIdentity, Generation, Layer, Source
from ctxledger.projections.catalog import ReadModels
from ctxledger.projections.generations import Generations
from tests.web_store import AGENT, EngineStore, build_engine_store, copy_engine_store

TOKEN = "test-token-0123456789abcdef"
PAGES = (
    "/",
    f"/agents/{AGENT}",
    f"/agents/{AGENT}/generations/1",
    f"/agents/{AGENT}/generations/2",
    f"/agents/{AGENT}/generations/3",
    f"/agents/{AGENT}/diff?from=1&to=3",
    "/cache",
    "/memory",
)


@pytest.fixture(scope="module")
def template_store(tmp_path_factory: pytest.TempPathFactory) -> EngineStore:
    return build_engine_store(tmp_path_factory.mktemp("web") / "ledger.db")


@pytest.fixture
def store(template_store: EngineStore, tmp_path: Path) -> EngineStore:
    """A private copy of the engine-written store for one test."""
    return copy_engine_store(template_store, tmp_path)


@pytest.fixture
def client(store: EngineStore) -> Iterator[TestClient]:
    app = create_app(store.url, token=TOKEN, catalog=store.catalog)
    with TestClient(app, follow_redirects=False) as c:
        yield c


def states_of(store: EngineStore) -> ReadModels:
    with open_ledger(store.url) as ledger:
        return read_states(ledger)


def generations(store: EngineStore) -> tuple[Generation, ...]:
    gens: Generations = states_of(store).generations
    return gens.by_agent[AGENT].generations


def events_after(store: EngineStore, position: int) -> list[ev.Event]:
    with open_ledger(store.url) as ledger:
        return [r.event for r in ledger.read_all(after=position)]


def log_end(store: EngineStore) -> int:
    with open_ledger(store.url) as ledger:
        return ledger.max_position()


def by_testid(html: str, name: str) -> str:
    found = re.search(rf'data-testid="{re.escape(name)}"[^>]*>([^<]*)<', html)
    assert found is not None, name
    return found.group(1).strip()


def post(client: TestClient, fields: dict[str, str], agent: str = AGENT) -> Any:
    return client.post(f"/agents/{agent}/control", data=fields)


# --- pages ------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", PAGES)
def test_every_page_renders_without_scripts_and_with_a_strict_csp(
    client: TestClient, path: str
) -> None:
    r = client.get(path)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    assert "<script" not in r.text.lower()
    csp = r.headers["content-security-policy"]
    assert "default-src 'none'" in csp
    assert "script-src" not in csp  # scripts fall back to 'none'
    assert r.headers["x-frame-options"] == "DENY"


def test_agents_list_shows_each_agent_with_its_current_generation(
    client: TestClient, store: EngineStore
) -> None:
    html = client.get("/").text
    gens = generations(store)
    assert f'href="/agents/{AGENT}"' in html
    assert by_testid(html, "generations") == str(len(gens))
    assert by_testid(html, "usage") == f"{gens[-1].tokens_used} / {gens[-1].budget}"


def test_timeline_lists_every_generation_with_its_reason(
    client: TestClient, store: EngineStore
) -> None:
    html = client.get(f"/agents/{AGENT}").text
    rows = re.findall(r'<tr data-generation="(\d+)"', html)
    assert rows == ["1", "2", "3"]
    assert "budget: next pack needs" in html
    assert "context-limit error from anthropic" in html
    kinds = [g.kind for g in generations(store)]
    assert kinds == ["initial", "rebuild", "refresh"]
    for kind in kinds:
        assert f'<span class="kind {kind}">{kind}</span>' in html


@pytest.mark.parametrize("number", [1, 2, 3])
def test_generation_page_numbers_equal_the_read_models(
    client: TestClient, store: EngineStore, number: int
) -> None:
    gen = generations(store)[number - 1]
    html = client.get(f"/agents/{AGENT}/generations/{number}").text
    assert by_testid(html, "used") == str(gen.tokens_used)
    assert by_testid(html, "budget") == str(gen.budget)
    assert by_testid(html, "overflow") == str(gen.overflow)
    assert by_testid(html, "builds") == str(gen.builds)
    whole = sorted(k for k, d in gen.decisions.items() if d.action == "included")
    dropped = sorted(k for k, d in gen.decisions.items() if d.action == "dropped")
    assert by_testid(html, "included-count") == str(len(whole))
    assert by_testid(html, "dropped-count") == str(len(dropped))
    table = html.split('data-testid="included-items"', 1)[1].split("</table>", 1)[0]
    assert sorted(re.findall(r'<tr data-item-id="([^"]+)"', table)) == whole
    table = html.split('data-testid="dropped-items"', 1)[1].split("</table>", 1)[0]
    assert sorted(re.findall(r'<tr data-item-id="([^"]+)"', table)) == dropped
    # the usage bar carries the same numbers as the read model
    assert f'data-used="{gen.tokens_used}" data-budget="{gen.budget}"' in html


def test_generation_page_composition_chart_sums_to_the_included_tokens(
    client: TestClient, store: EngineStore
) -> None:
    html = client.get(f"/agents/{AGENT}/generations/2").text
    layer_svg = html.split('aria-label="tokens by layer"', 1)[1].split("</svg>", 1)[0]
    values = [int(v) for v in re.findall(r'data-value="(\d+)"', layer_svg)]
    assert sum(values) == generations(store)[1].tokens_used


def test_diff_page_lists_what_entered_and_left(client: TestClient, store: EngineStore) -> None:
    g1, _, g3 = generations(store)
    kept1 = {k for k, d in g1.decisions.items() if d.action != "dropped"}
    kept3 = {k for k, d in g3.decisions.items() if d.action != "dropped"}
    html = client.get(f"/agents/{AGENT}/diff?from=1&to=3").text
    assert by_testid(html, "tokens-from") == str(g1.tokens_used)
    assert by_testid(html, "tokens-to") == str(g3.tokens_used)
    assert by_testid(html, "entered-count") == str(len(kept3 - kept1))
    assert by_testid(html, "left-count") == str(len(kept1 - kept3))
    assert "2: rebuild (budget)" in html
    assert "3: refresh (context_limit)" in html


def test_diff_defaults_to_the_last_two_generations(client: TestClient) -> None:
    html = client.get(f"/agents/{AGENT}/diff").text
    assert (by_testid(html, "from"), by_testid(html, "to")) == ("2", "3")


def test_cache_page_shows_hit_rate_and_expected_vs_reported(
    client: TestClient, store: EngineStore
) -> None:
    cache = states_of(store).cache_stats
    html = client.get("/cache").text
    overall = html.split('data-testid="overall"', 1)[1].split("</dl>", 1)[0]
    assert by_testid(overall, "calls") == str(cache.overall.calls)
    assert by_testid(overall, "cache-read") == str(cache.overall.cache_read_tokens)
    assert by_testid(overall, "expected") == str(cache.overall.expected_cached_tokens)
    rate = cache.overall.cache_read_tokens / (
        cache.overall.input_tokens
        + cache.overall.cache_read_tokens
        + cache.overall.cache_write_tokens
    )
    assert by_testid(overall, "hit-rate") == f"{rate * 100:.1f}%"
    for n in (1, 2, 3):
        row = html.split(f'<tr data-generation="{n}">', 1)[1].split("</tr>", 1)[0]
        totals = cache.by_generation[AGENT][n]
        assert by_testid(row, "expected") == str(totals.expected_cached_tokens)
        assert by_testid(row, "cache-read") == str(totals.cache_read_tokens)
    assert 'aria-label="hit rate per generation"' in html


def test_pages_follow_events_appended_by_another_writer(
    client: TestClient, store: EngineStore
) -> None:
    before = client.get(f"/agents/{AGENT}").text
    assert 'data-generation="4"' not in before
    with open_engine(store.url) as other:  # another writer on the same file
        other.record(AGENT, "new observation", layer=Layer.L1, source=Source.TEST_RESULT)
        other.rebuild(AGENT, reason="from another process")
    after = client.get(f"/agents/{AGENT}").text
    assert 'data-generation="4"' in after
    assert "manual: from another process" in after


def test_item_content_is_escaped(client: TestClient, store: EngineStore) -> None:
    with open_engine(store.url) as other:
        other.record(AGENT, "<script>alert(1)</script>", layer=Layer.L1, source=Source.TOOL_LOG)
        other.rebuild(AGENT, reason="<b>bold</b>")
    html = client.get(f"/agents/{AGENT}/generations/4").text
    assert "<script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;b&gt;bold&lt;/b&gt;" in html


# --- 404 and 400 on GET -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/agents/nobody",
        "/agents/nobody/generations/1",
        f"/agents/{AGENT}/generations/9",
        f"/agents/{AGENT}/generations/0",
        f"/agents/{AGENT}/generations/two",
        f"/agents/{AGENT}/diff?from=1&to=9",
        "/agents/nobody/diff?from=1&to=2",
        "/nowhere",
    ],
)
def test_unknown_agent_or_generation_is_a_404_page(client: TestClient, path: str) -> None:
    r = client.get(path)
    assert r.status_code == 404
    assert by_testid(r.text, "status") == "404"
    assert "Not found" in r.text


@pytest.mark.parametrize("query", ["from=one&to=2", "from=1&to=-2", "from=1.5&to=2"])
def test_malformed_diff_query_is_a_400_with_the_reason(client: TestClient, query: str) -> None:
    r = client.get(f"/agents/{AGENT}/diff?{query}")
    assert r.status_code == 400
    assert "must be a generation number" in by_testid(r.text, "reason")


# --- controls ---------------------------------------------------------------------------------


def test_control_forms_carry_the_server_token(client: TestClient) -> None:
    html = client.get(f"/agents/{AGENT}/generations/3").text
    tokens = set(re.findall(r'name="csrf_token" value="([^"]*)"', html))
    assert tokens == {TOKEN}
    assert 'data-action="pin"' in html


def test_pin_appends_item_pinned_and_redirects_back(client: TestClient, store: EngineStore) -> None:
    start = log_end(store)
    back = f"/agents/{AGENT}/generations/3"
    r = post(
        client,
        {"csrf_token": TOKEN, "action": "pin", "item_id": store.finding, "next": back},
    )
    assert r.status_code == 303
    assert r.headers["location"] == back
    new = events_after(store, start)
    assert len(new) == 1
    assert isinstance(new[0], ev.ItemPinned)
    # the actor names the remote address (TestClient's client is "testclient")
    expected = (AGENT, store.finding, "web-inspector@testclient")
    assert (new[0].agent_id, new[0].item_id, new[0].by) == expected
    assert states_of(store).pool.by_agent[AGENT].items[store.finding].pinned


@pytest.mark.parametrize(
    ("action", "event_type"),
    [
        ("verify", ev.FindingVerified),
        ("remove", ev.ItemRemoved),
    ],
)
def test_item_controls_append_their_event(
    client: TestClient, store: EngineStore, action: str, event_type: type[ev.Event]
) -> None:
    start = log_end(store)
    r = post(client, {"csrf_token": TOKEN, "action": action, "item_id": store.hypothesis})
    assert r.status_code == 303
    assert r.headers["location"] == f"/agents/{AGENT}"
    new = events_after(store, start)
    assert [type(e) for e in new] == [event_type]


def test_unpin_after_pin(client: TestClient, store: EngineStore) -> None:
    start = log_end(store)
    for action in ("pin", "unpin"):
        r = post(client, {"csrf_token": TOKEN, "action": action, "item_id": store.finding})
        assert r.status_code == 303
    assert [type(e) for e in events_after(store, start)] == [ev.ItemPinned, ev.ItemUnpinned]


@pytest.mark.parametrize(("action", "kind"), [("refresh", "refresh"), ("rebuild", "rebuild")])
def test_refresh_and_rebuild_start_a_new_generation(
    client: TestClient, store: EngineStore, action: str, kind: str
) -> None:
    r = post(client, {"csrf_token": TOKEN, "action": action, "reason": "operator"})
    assert r.status_code == 303
    assert r.headers["location"] == f"/agents/{AGENT}/generations/4"
    g4 = generations(store)[-1]
    assert (g4.number, g4.kind, g4.trigger) == (4, kind, "manual")
    assert "operator" in g4.reason
    assert client.get(r.headers["location"]).status_code == 200


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"action": "explode"}, "unknown action"),
        ({"action": "pin"}, "pin needs an item_id"),
        ({"action": "refresh", "item_id": "it_x"}, "refresh takes no item_id"),
        ({"action": "pin", "item_id": "it_nope"}, "has no item"),
        ({"action": "pin", "item_id": "x" * 201}, "longer than 200"),
        ({"action": "refresh", "reason": "a\x00b"}, "control characters"),
        ({"action": "pin", "item_id": "it_x", "color": "red"}, "unknown form field"),
    ],
)
def test_malformed_form_is_a_400_and_writes_nothing(
    client: TestClient, store: EngineStore, fields: dict[str, str], reason: str
) -> None:
    start = log_end(store)
    r = post(client, {"csrf_token": TOKEN, **fields})
    assert r.status_code == 400
    assert reason in by_testid(r.text, "reason")
    assert log_end(store) == start


def test_removing_a_pinned_item_is_a_400(client: TestClient, store: EngineStore) -> None:
    start = log_end(store)
    r = post(client, {"csrf_token": TOKEN, "action": "remove", "item_id": store.objective})
    assert r.status_code == 400
    assert "pinned or mandatory" in by_testid(r.text, "reason")
    assert log_end(store) == start


def test_removed_item_cannot_be_controlled_again(client: TestClient, store: EngineStore) -> None:
    removed = post(client, {"csrf_token": TOKEN, "action": "remove", "item_id": store.hypothesis})
    assert removed.status_code == 303
    start = log_end(store)
    r = post(client, {"csrf_token": TOKEN, "action": "pin", "item_id": store.hypothesis})
    assert r.status_code == 400
    assert "was removed" in by_testid(r.text, "reason")
    assert log_end(store) == start


def test_control_on_unknown_agent_is_a_404(client: TestClient, store: EngineStore) -> None:
    start = log_end(store)
    r = post(client, {"csrf_token": TOKEN, "action": "refresh"}, agent="nobody")
    assert r.status_code == 404
    assert log_end(store) == start


def test_duplicate_fields_and_wrong_encoding_are_400(
    client: TestClient, store: EngineStore
) -> None:
    start = log_end(store)
    r = client.post(
        f"/agents/{AGENT}/control",
        content=f"csrf_token={TOKEN}&action=pin&action=unpin&item_id={store.finding}",
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert r.status_code == 400
    assert "more than once" in by_testid(r.text, "reason")
    r = client.post(
        f"/agents/{AGENT}/control",
        json={"csrf_token": TOKEN, "action": "pin", "item_id": store.finding},
    )
    assert r.status_code == 400
    assert "x-www-form-urlencoded" in by_testid(r.text, "reason")
    r = client.post(
        f"/agents/{AGENT}/control",
        content=b"csrf_token=" + b"a" * 20_000,
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert r.status_code == 400
    assert "larger than" in by_testid(r.text, "reason")
    assert log_end(store) == start


# --- CSRF and read-only -----------------------------------------------------------------------


@pytest.mark.parametrize("token", [None, "", "wrong-token-0123456789", TOKEN[:-1], TOKEN + "x"])
def test_post_without_the_right_token_is_refused(
    client: TestClient, store: EngineStore, token: str | None
) -> None:
    start = log_end(store)
    fields = {"action": "pin", "item_id": store.finding}
    if token is not None:
        fields["csrf_token"] = token
    r = post(client, fields)
    assert r.status_code == 403
    assert "CSRF token" in by_testid(r.text, "reason")
    assert log_end(store) == start


@pytest.mark.parametrize(
    "headers",
    [
        {"origin": "http://evil.example"},
        {"origin": "null"},
        {"sec-fetch-site": "cross-site"},
    ],
)
def test_cross_site_post_is_refused_even_with_the_token(
    client: TestClient, store: EngineStore, headers: dict[str, str]
) -> None:
    start = log_end(store)
    r = client.post(
        f"/agents/{AGENT}/control",
        data={"csrf_token": TOKEN, "action": "pin", "item_id": store.finding},
        headers=headers,
    )
    assert r.status_code == 403
    assert log_end(store) == start


def test_same_origin_header_is_accepted(client: TestClient, store: EngineStore) -> None:
    r = client.post(
        f"/agents/{AGENT}/control",
        data={"csrf_token": TOKEN, "action": "pin", "item_id": store.finding},
        headers={"origin": "http://testserver", "sec-fetch-site": "same-origin"},
    )
    assert r.status_code == 303


def test_read_only_hides_controls_and_refuses_posts(store: EngineStore) -> None:
    start = log_end(store)
    app = create_app(store.url, token=TOKEN, read_only=True)
    with TestClient(app, follow_redirects=False) as c:
        for path in PAGES:
            html = c.get(path).text
            assert 'method="post"' not in html
            assert "csrf_token" not in html
        r = c.post(
            f"/agents/{AGENT}/control",
            data={"csrf_token": TOKEN, "action": "pin", "item_id": store.finding},
        )
        assert r.status_code == 403
        assert "read-only" in by_testid(r.text, "reason")
    assert log_end(store) == start


def test_get_on_the_control_route_is_405(client: TestClient) -> None:
    r = client.get(f"/agents/{AGENT}/control")
    assert r.status_code == 405
    assert "POST" in r.headers["allow"]


def test_a_loopback_bind_refuses_a_rebound_host_name(store: EngineStore) -> None:
    app = create_app(store.url, token=TOKEN, access=access_for_bind("127.0.0.1", 8765, None))
    with TestClient(app, base_url="http://127.0.0.1:8765") as c:
        assert c.get("/").status_code == 200
    with TestClient(app, base_url="http://attacker.example") as c:
        assert c.get("/").status_code == 421


def test_each_server_gets_its_own_random_token(store: EngineStore) -> None:
    a = create_app(store.url)
    b = create_app(store.url)
    assert len(a.state.csrf_token) >= 32
    assert a.state.csrf_token != b.state.csrf_token


# --- construction, memory page ----------------------------------------------------------------


def test_bad_store_url_and_short_token_fail_at_creation(tmp_path: Path) -> None:
    with pytest.raises(StoreURLError):
        create_app("ftp://nowhere")
    with pytest.raises(InvalidInputError, match="at least 16"):
        create_app(f"sqlite:///{tmp_path / 'x.db'}", token="short")


def test_display_url_hides_a_password() -> None:
    assert display_url("postgresql://u:s3cret@db:5432/x") == "postgresql://u:***@db:5432/x"
    assert display_url("sqlite:///a.db") == "sqlite:///a.db"


def test_without_catalog_the_memory_page_says_how_and_promote_is_refused(
    store: EngineStore,
) -> None:
    start = log_end(store)
    with TestClient(create_app(store.url, token=TOKEN), follow_redirects=False) as c:
        html = c.get("/memory").text
        assert 'data-status="not_configured"' in html
        assert "--catalog" in html
        assert 'data-action="promote"' not in c.get(f"/agents/{AGENT}/generations/3").text
        r = post(c, {"csrf_token": TOKEN, "action": "promote", "item_id": store.finding})
        assert r.status_code == 400
        assert "--catalog" in by_testid(r.text, "reason")
    assert log_end(store) == start


def catalog_entries(store: EngineStore) -> dict[str, str]:
    from ctxledger.adapters.memory.catalog import MemoryCatalog

    with MemoryCatalog.open(store.catalog) as catalog:
        return {e.id: e.state for e in catalog.list()}


def test_promote_then_verify_memory_through_the_forms(
    client: TestClient, store: EngineStore
) -> None:
    start = log_end(store)
    r = post(client, {"csrf_token": TOKEN, "action": "promote", "item_id": store.finding})
    assert r.status_code == 303
    (promoted,) = events_after(store, start)
    assert isinstance(promoted, ev.MemoryPromoted)
    assert promoted.item_id == store.finding
    assert catalog_entries(store) == {promoted.memory_id: "candidate"}
    html = client.get("/memory").text
    assert f'<tr data-memory-id="{promoted.memory_id}">' in html
    assert 'data-action="verify-memory"' in html
    mid = log_end(store)
    r = client.post(
        "/memory/control",
        data={"csrf_token": TOKEN, "action": "verify", "memory_id": promoted.memory_id},
    )
    assert r.status_code == 303
    assert r.headers["location"] == "/memory"
    assert [type(e) for e in events_after(store, mid)] == [ev.MemoryVerified]
    assert catalog_entries(store) == {promoted.memory_id: "verified"}


@pytest.mark.parametrize(
    ("fields", "status", "reason"),
    [
        ({"action": "verify", "memory_id": "mem_" + "0" * 24}, 404, "no memory entry"),
        ({"action": "verify", "memory_id": "../etc"}, 400, "malformed memory_id"),
        ({"action": "delete", "memory_id": "mem_" + "0" * 24}, 400, "unknown memory action"),
        ({"csrf_token": "", "action": "verify", "memory_id": "mem_" + "0" * 24}, 403, "CSRF"),
    ],
)
def test_bad_memory_controls_write_nothing(
    client: TestClient, store: EngineStore, fields: dict[str, str], status: int, reason: str
) -> None:
    start = log_end(store)
    before = catalog_entries(store)
    r = client.post("/memory/control", data={"csrf_token": TOKEN, **fields})
    assert r.status_code == status
    assert reason in by_testid(r.text, "reason")
    assert log_end(store) == start
    assert catalog_entries(store) == before


def test_memory_page_never_creates_a_missing_catalog(store: EngineStore, tmp_path: Path) -> None:
    missing = tmp_path / "memory.db"
    with TestClient(create_app(store.url, catalog=missing)) as c:
        html = c.get("/memory").text
    assert 'data-status="missing"' in html
    assert not missing.exists()


def test_memory_page_lists_catalog_entries_and_states(store: EngineStore, tmp_path: Path) -> None:
    from ctxledger.adapters.memory.catalog import MemoryCatalog

    path = tmp_path / "memory.db"
    when = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
    with MemoryCatalog.open(path) as catalog:
        partition = catalog.partition_for("/work/project")
        first = catalog.add_candidate(
            partition=partition,
            body="Run the tests with make test.",
            source="worker_finding",
            agent=AGENT,
            task="fix-auth-timeout",
            observed_at=when,
        )
        catalog.verify(first.id, first.revision)
        second = catalog.add_candidate(
            partition=partition,
            body="Session.refresh compares naive and aware datetimes.",
            source="worker_finding",
            agent=AGENT,
            task="fix-auth-timeout",
            observed_at=when,
        )
    with TestClient(create_app(store.url, catalog=path)) as c:
        html = c.get("/memory").text
    rows = dict(
        re.findall(
            r'<tr data-memory-id="([^"]+)">\s*<td[^>]*>[^<]*</td>\s*'
            r'<td><span class="tag state-(\w+)"',
            html,
        )
    )
    assert rows == {first.id: "verified", second.id: "candidate"}
    assert "Run the tests with make test." in html


@pytest.mark.postgres
def test_pages_and_controls_over_postgresql(pg_url: str) -> None:
    from ctxledger.adapters.clock import SteppingClock
    from ctxledger.adapters.engine import EngineSettings
    from ctxledger.domain.model import AgentIdentity

    with open_engine(
        pg_url, clock=SteppingClock(), settings=EngineSettings(session_id="pg")
    ) as engine:
        engine.register_agent(AgentIdentity(agent_id=AGENT, role="primary", budget=300))
        item = engine.record(AGENT, "an observation", layer=Layer.L1, source=Source.TEST_RESULT)
        engine.build(AGENT, budget=300)
    with open_ledger(pg_url) as ledger:
        start = ledger.max_position()
    with TestClient(create_app(pg_url, token=TOKEN), follow_redirects=False) as c:
        html = c.get(f"/agents/{AGENT}/generations/1").text
        assert f'<tr data-item-id="{item.id}"' in html
        r = post(c, {"csrf_token": TOKEN, "action": "pin", "item_id": item.id})
        assert r.status_code == 303
    with open_ledger(pg_url) as ledger:
        new = [rec.event for rec in ledger.read_all(after=start)]
    assert [type(e) for e in new] == [ev.ItemPinned]


def test_agents_list_sorts_each_level_and_keeps_workers_below_their_parent(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'agents.db'}"
    engine = open_engine(open_ledger(url))
    # roots with 1, 3 and 2 generations; two workers of "b-lead" with 2 and 1
    plan = {"a-lead": ("", 1), "b-lead": ("", 3), "c-lead": ("", 2), "w1": ("b-lead", 2),
            "w2": ("b-lead", 1)}  # fmt: skip
    for agent_id, (parent, gens) in plan.items():
        engine.register_agent(
            AgentIdentity(agent_id=agent_id, role="worker", parent=parent, budget=500)
        )
        engine.record(agent_id, f"note for {agent_id}")
        engine.build(agent_id)
        for _ in range(gens - 1):
            engine.refresh(agent_id, reason="test")
    engine.close()
    with TestClient(create_app(url, token=TOKEN), follow_redirects=False) as c:

        def order(query: str) -> list[str]:
            html = c.get("/" + query).text
            table = html[html.index('data-testid="agents"') :]
            return re.findall(r'<tr data-agent-id="([^"]+)"', table)

        assert order("") == ["a-lead", "b-lead", "w1", "w2", "c-lead"]
        assert order("?sort=agent&dir=desc") == ["c-lead", "b-lead", "w2", "w1", "a-lead"]
        assert order("?sort=generations&dir=desc") == ["b-lead", "w1", "w2", "c-lead", "a-lead"]
        assert order("?sort=generations") == ["a-lead", "c-lead", "b-lead", "w2", "w1"]
        page = c.get("/?sort=generations&dir=desc").text
        assert 'data-sort="generations" class="sorted" aria-sort="descending"' in page
        for bad in ("?sort=password", "?dir=up", "?sort=%C2%B2"):
            response = c.get("/" + bad)
            assert response.status_code == 400, bad
