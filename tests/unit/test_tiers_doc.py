"""docs/strategies.md's priority-tier table is the code's: every example it gives is built and
its tier checked against ``priority_tier``; every layer and source is named in it; and
architecture memory (L3) is tier 3 even as a verified fact (seed 000's priority, issue 39)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ctxledger.domain.model import Item, Layer, Source
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.strategies import select_context
from ctxledger.domain.tiers import priority_tier
from ctxledger.domain.tokens import EstimatingCounter

DOC = Path(__file__).resolve().parents[2] / "docs" / "strategies.md"
ROW = re.compile(r"^\| (\d) \| [^|]+ \| (`.+`) \|$")
FLAGS = frozenset({"pinned", "mandatory", "verified", "failure"})


def _example(text: str) -> Item:
    layer, source, *flags = text.split()
    assert set(flags) <= FLAGS, f"unknown flag in {text!r}"
    return Item(
        id=text.replace(" ", "-"),
        layer=Layer[layer],
        source=Source(source),
        content=f"content of {text}",
        pinned="pinned" in flags,
        mandatory="mandatory" in flags,
        verified="verified" in flags,
        failure="failure" in flags,
    )


def _table() -> list[tuple[int, list[str]]]:
    section = DOC.read_text(encoding="utf-8").split("## Priority tiers", 1)[1].split("\n## ", 1)[0]
    rows = [ROW.match(line) for line in section.splitlines() if line.startswith("| ")]
    found = [(int(m[1]), re.findall(r"`([^`]+)`", m[2])) for m in rows if m is not None]
    assert len(found) >= 5, "the tier table of docs/strategies.md was not found"
    return found


def test_every_example_of_the_table_has_its_documented_tier() -> None:
    wrong = [
        (text, tier, priority_tier(_example(text)))
        for tier, examples in _table()
        for text in examples
        if priority_tier(_example(text)) != tier
    ]
    assert wrong == []


def test_the_table_names_every_layer_and_source() -> None:
    items = [_example(text) for _, examples in _table() for text in examples]
    assert {it.layer for it in items} == set(Layer)
    assert {it.source for it in items} == set(Source)
    assert {tier for tier, _ in _table()} == {0, 1, 2, 3, 4}


@pytest.mark.parametrize("source", [s for s in Source if s.value not in {
    "user_requirement", "steering_note", "role_instruction"}])  # fmt: skip
def test_architecture_memory_is_tier_3_whatever_its_source(source: Source) -> None:
    memory = Item(id="m", layer=Layer.L3, source=source, content="c", verified=True)
    assert priority_tier(memory) == 3
    assert (
        priority_tier(Item(id="f", layer=Layer.L3, source=source, content="c", failure=True)) == 3
    )


def test_l3_verified_fact_packs_below_verified_findings_with_parent_reports() -> None:
    """Room for two of three: the verified finding (tier 2) goes first; the L3 verified fact
    and the parent report compete in tier 3 on score (the parent report scores higher for a
    primary), so the architecture memory is the one dropped."""
    pool = [
        Item(id="memory", layer=Layer.L3, source=Source.VERIFIED_FACT, content="conv", verified=True,
             token_count=100),
        Item(id="finding", layer=Layer.L2, source=Source.WORKER_FINDING, content="root cause",
             verified=True, token_count=100),
        Item(id="report", layer=Layer.L2, source=Source.PARENT_REPORT, content="report",
             token_count=100),
    ]  # fmt: skip
    pack = select_context(
        BuildRequest(
            agent_id="a", role="primary", budget=200, now=datetime(2026, 1, 1, tzinfo=UTC)
        ),
        pool,
        counter=EstimatingCounter(),
    )
    fate = {d.item_id: (d.action, d.reason) for d in pack.decisions.values()}
    assert fate == {
        "finding": ("included", ""),
        "report": ("included", ""),
        "memory": ("dropped", "over_budget"),
    }
