"""Every worked example in docs/strategies.md is executed and its claims checked."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ctxledger.domain.model import Item, Layer, Source
from ctxledger.domain.request import BuildRequest, Scope
from ctxledger.domain.strategies import select_context, strategy_names
from ctxledger.domain.tokens import EstimatingCounter

DOC = Path(__file__).resolve().parents[2] / "docs" / "strategies.md"
NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
BLOCK = re.compile(r"```ctxledger-example\n(.*?)```", re.DOTALL)


class Example(msgspec.Struct, frozen=True):
    strategy: str
    request: BuildRequest
    pool: list[Item]
    expected: dict[str, tuple[str, str]]
    used: int
    overflow: int


def _options(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for word in text.split():
        key, eq, value = word.partition("=")
        out[key] = value if eq else True
    return out


def _item(line: str) -> Item:
    item_id, layer, source, tokens, *rest = line.split()
    opts = _options(" ".join(rest))
    age = int(opts.pop("age", 60))
    return Item(
        id=item_id,
        layer=Layer[layer],
        source=Source(source),
        content=str(opts.pop("content", f"content of {item_id}")),
        token_count=int(tokens),
        observed_at=NOW - timedelta(minutes=age),
        pinned=bool(opts.pop("pinned", False)),
        mandatory=bool(opts.pop("mandatory", False)),
        group=str(opts.pop("group", "")),
        source_id=str(opts.pop("source_id", "")),
        task=str(opts.pop("task", "")),
        phase=str(opts.pop("phase", "")),
    )


def parse(block: str) -> Example:
    head: dict[str, str] = {}
    pool: list[Item] = []
    expected: dict[str, tuple[str, str]] = {}
    section = ""
    for raw in block.splitlines():
        line = raw.strip()
        if not line:
            continue
        if raw.startswith("  "):
            if section == "pool":
                pool.append(_item(line))
            else:
                item_id, action, *reason = line.split()
                expected[item_id] = (action, reason[0] if reason else "")
            continue
        if line.startswith("used:"):
            m = re.fullmatch(r"used: (\d+) overflow: (\d+)", line)
            assert m, line
            head["used"], head["overflow"] = m.group(1), m.group(2)
            continue
        key, _, value = line.partition(":")
        section = key
        head[key] = value.strip()
    scope_opts = _options(head.get("scope", ""))
    scope = Scope(
        exclude_project_memory=bool(scope_opts.get("exclude_project_memory", False)),
        dependency_task_ids=(
            tuple(str(scope_opts["dependency_task_ids"]).split(","))
            if "dependency_task_ids" in scope_opts
            else None
        ),
    )
    req_opts = _options(head.get("request", ""))
    request = BuildRequest(
        agent_id="doc",
        budget=int(head["budget"]),
        now=NOW,
        strategy=head["strategy"],
        task=str(req_opts.get("task", "")),
        role=str(req_opts.get("role", "")),
        phase=str(req_opts.get("phase", "")),
        scope=scope,
    )
    return Example(
        strategy=head["strategy"],
        request=request,
        pool=pool,
        expected=expected,
        used=int(head["used"]),
        overflow=int(head["overflow"]),
    )


EXAMPLES = [parse(b) for b in BLOCK.findall(DOC.read_text(encoding="utf-8"))]


def test_the_doc_has_an_example_for_every_strategy() -> None:
    assert {e.strategy for e in EXAMPLES} == set(strategy_names())


@pytest.mark.parametrize(
    "example", EXAMPLES, ids=[f"{e.strategy}-{i}" for i, e in enumerate(EXAMPLES)]
)
def test_doc_example_holds(example: Example) -> None:
    res = select_context(example.request, example.pool, EstimatingCounter())
    got = {k: (d.action, d.reason) for k, d in res.decisions.items()}
    assert got == example.expected
    assert (res.used, res.overflow) == (example.used, example.overflow)
    assert res.strategy == example.strategy
