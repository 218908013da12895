"""The "why" and the prompt-as-sent pages in a real headless Chromium, checked against what the
engine itself produced at build time.

An engine in this process records a pool that does not fit its budget and builds once (so
items are included and dropped), keeping the BuildResult and the Anthropic request it
rendered. Then ``ctxledger serve`` (the installed console script) serves that ledger and the
browser reads: the score and every score part of an included and a dropped item (equal to the
pure scoring function on the item and the build's request); the build page's segments, whose
texts concatenate to the exact prompt the engine composed and whose breakpoints are where the
engine's rendered request put its ``cache_control`` marks; and an item's whole content behind
its ``<details>``, opened by a click.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.clock import SteppingClock
from ctxledger.adapters.engine import BuildResult, ContextEngine, EngineSettings
from ctxledger.adapters.ledger import open_ledger
from ctxledger.adapters.tokens import default_counter
from ctxledger.domain.model import AgentIdentity, Layer, Source
from ctxledger.domain.prompt import SEGMENT_ORDER
from ctxledger.projections.build_trace import SCORE_PARTS, score_parts
from tests.e2e.test_web_browser import browser, page, serving  # noqa: F401 - fixtures

if TYPE_CHECKING:
    from playwright.sync_api import Page

AGENT = "why-agent"
MODEL = "claude-sonnet-4-5"
LONG = "Traceback (most recent call last):\n" + "".join(
    f'  File "src/auth/session.py", line {k}, in refresh\n    token = store.get(key)\n'
    for k in range(40)
)


@pytest.fixture
def built(tmp_path: Path) -> tuple[Path, BuildResult, dict[str, Any], ContextEngine]:
    """demo.db in *tmp_path* (the name ``serving`` serves) with one build over a pool larger
    than the budget; the build's result and its rendered Anthropic request."""
    engine = open_engine(
        open_ledger(f"sqlite:///{tmp_path / 'demo.db'}"),
        counter=default_counter(),
        clock=SteppingClock(datetime(2026, 3, 1, tzinfo=UTC), timedelta(minutes=7)),
        settings=EngineSettings(session_id="why"),
    )
    engine.register_agent(
        AgentIdentity(agent_id=AGENT, role="worker", task="fix auth", model=MODEL, budget=1_500)
    )
    rules = " ".join(f"rule {k}: keep the session refresh idempotent." for k in range(150))
    engine.record(AGENT, rules, layer=Layer.L1, source=Source.USER_REQUIREMENT, pinned=True)
    engine.record(
        AGENT, LONG, source=Source.TEST_RESULT, failure=True, files=("src/auth/session.py",)
    )
    for k in range(30):
        engine.record(
            AGENT,
            f"observation {k}: the cache layer logs a {'timeout' if k % 3 else 'retry'} "
            f"for tenant {k} " + "detail " * (20 + k),
            source=Source.TOOL_LOG,
        )
    result = engine.build(AGENT, keywords=["auth", "timeout"], files=["src/auth/session.py"])
    request = engine.render(result, "anthropic", MODEL)
    engine.close()
    reopened = open_engine(open_ledger(f"sqlite:///{tmp_path / 'demo.db'}"))
    return tmp_path, result, dict(request), reopened


def _score_cell(pg: Page, item_id: str) -> dict[str, str]:
    row = pg.locator(f'tr[data-item-id="{item_id}"] [data-testid="why"]').first
    return {
        name: row.locator(f'[data-part="{name}"]').first.inner_text().strip()
        for name in ("tier", "score", *SCORE_PARTS)
    }


def test_score_parts_of_an_included_and_a_dropped_item(
    built: tuple[Path, BuildResult, dict[str, Any], ContextEngine],
    page: Page,  # noqa: F811 - the fixture
) -> None:
    cwd, result, _request, engine = built
    decisions = {d.item_id: d for d in result.pack.decisions}
    included = next(i for i, d in decisions.items() if d.action == "included")
    dropped = next(
        i for i, d in decisions.items() if d.action == "dropped" and d.reason == "over_budget"
    )
    start = engine.agent(AGENT).last_request
    assert start is not None
    pool = engine.pool(AGENT)
    with serving(cwd) as base:
        page.goto(f"{base}/agents/{AGENT}/generations/1")
        page.locator('[data-testid="dropped-section"] summary').first.click()
        for item_id in (included, dropped):
            shown = _score_cell(page, item_id)
            expected = score_parts(pool.current(item_id), start)
            assert shown["score"] == f"{expected.total:.3f}", item_id
            for name in SCORE_PARTS:
                assert shown[name] == f"{expected.part(name):+.3f}", (item_id, name)
    engine.close()


def test_the_prompt_page_is_the_prompt_the_engine_composed(
    built: tuple[Path, BuildResult, dict[str, Any], ContextEngine],
    page: Page,  # noqa: F811 - the fixture
) -> None:
    cwd, result, request, engine = built
    engine.close()
    pack_id = result.pack.id
    with serving(cwd) as base:
        page.goto(f"{base}/agents/{AGENT}/generations/1")
        page.locator(f'tr[data-pack-id="{pack_id}"] a').first.click()
        rows = page.locator('[data-testid="segments"] tbody tr')
        names = [rows.nth(k).locator("td").first.inner_text().strip() for k in range(rows.count())]
        assert names == [s.value.upper() for s in SEGMENT_ORDER]
        texts = page.locator('[data-testid="segment-text"]')
        shown = "".join(texts.nth(k).text_content() or "" for k in range(texts.count()))
        assert shown == result.prompt.text  # byte for byte, as the engine composed it
        marks = [
            rows.nth(k).locator('[data-testid="breakpoint"]').inner_text().strip() == "yes"
            for k in range(rows.count())
        ]
    # the engine's own request: one system block per non-empty segment, in order
    present = [s for s in SEGMENT_ORDER if result.prompt.segments[s]]
    sent = {
        s: "cache_control" in block for s, block in zip(present, request["system"], strict=True)
    }
    assert marks == [sent.get(s, False) for s in SEGMENT_ORDER]
    assert any(marks)


def test_an_item_shows_its_whole_content(
    built: tuple[Path, BuildResult, dict[str, Any], ContextEngine],
    page: Page,  # noqa: F811 - the fixture
) -> None:
    cwd, _result, _request, engine = built
    long_id = next(i for i, it in engine.pool(AGENT).items.items() if it.content == LONG)
    engine.close()
    with serving(cwd) as base:
        page.goto(f"{base}/agents/{AGENT}/generations/1")
        section = page.locator(f'details.section:has(tr[data-item-id="{long_id}"]) > summary')
        if section.count():  # a dropped or reshaped item: its section opens first
            section.first.click()
        cell = page.locator(f'tr[data-item-id="{long_id}"] details.content').first
        assert cell.locator("summary").is_visible()
        assert not cell.locator("pre").is_visible()  # collapsed: no script, a <details>
        cell.locator("summary").click()
        assert cell.locator("pre").is_visible()
        preview = cell.locator("pre").inner_text()
        assert LONG.startswith(preview.rstrip("\n")[:200])
        more = cell.locator("a")
        if more.count():  # cut on the list: the item page holds it whole
            more.first.click()
        else:
            page.goto(f"{base}/agents/{AGENT}/items/{long_id}")
        assert page.locator('[data-testid="item-content"]').text_content() == LONG
