"""``ContextEngine.report_to_parent`` (seed 000, "parent reports"; issue 39): a worker's
transcript reaches its parent as one compressed ``parent_report`` — the summary capped at
1,200 characters, each list at 20 entries of at most 200 characters — recorded in the
parent's pool and sent in the parent's next prompt, never the worker's raw transcript."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.domain.compression import LIST_CAP, LIST_ITEM_CHARS, SUMMARY_CHARS
from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.model import AgentIdentity, Source
from ctxledger.projections.audit import audit


def _sections(text: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    current = ""
    for line in text.splitlines():
        if line.endswith(":") and not line.startswith("- "):
            current = line[:-1]
            found[current] = []
        elif current and line.startswith("- "):
            found[current].append(line[2:])
    return found


def test_a_long_transcript_reaches_the_parent_as_one_capped_report(tmp_path: Path) -> None:
    engine = open_engine(f"sqlite:///{tmp_path / 'ledger.db'}")
    try:
        engine.register_agent(AgentIdentity(agent_id="primary", role="primary", budget=8_000))
        engine.register_agent(
            AgentIdentity(agent_id="worker", role="worker", parent="primary", task="fix parser")
        )
        raw = []
        for i in range(60):
            raw.append(
                engine.record(
                    "worker",
                    f"Decided to change parse_{i} because the tokenizer drops {'x' * 80}\n"
                    f"$ pytest tests/test_{i}.py -k {'k' * 300}\n"
                    f"Risk {i}: {'flaky ' * 60}\n"
                    f"changed pkg/mod_{i}.py",
                    files=(f"pkg/{'d' * 250}_{i}.py",),
                    symbols=(f"Sym{i}",),
                )
            )
        report = engine.report_to_parent("worker")
        assert report.source == Source.PARENT_REPORT
        assert not report.verified
        summary = next(line for line in report.content.splitlines() if line.startswith("Summary: "))
        assert 0 < len(summary) - len("Summary: ") <= SUMMARY_CHARS == 1_200
        # the cap is reached, not just respected: 60 key lines of ~110 characters are cut to
        # the first ones that fit (transcript order), the last one clipped with an ellipsis
        body = summary[len("Summary: ") :]
        assert SUMMARY_CHARS - 110 < len(body) <= SUMMARY_CHARS
        assert "parse_0 " in body
        assert "parse_59 " not in body
        sections = _sections(report.content)
        assert set(sections) == {"Files", "Symbols", "Commands", "Risks"}
        for values in sections.values():
            assert len(values) == LIST_CAP == 20  # 60 distinct entries each, the first 20 kept
            assert all(len(v) <= LIST_ITEM_CHARS == 200 for v in values)
        # entries longer than 200 characters (the 250-character paths, the 300-character
        # commands) are cut to exactly 200, the last one an ellipsis
        long_paths = [f for f in sections["Files"] if "d" * 100 in f]
        assert long_paths
        assert all(len(f) == 200 and f.endswith("…") for f in long_paths)
        assert all(len(c) == 200 and c.endswith("…") for c in sections["Commands"])
        assert sections["Symbols"][:3] == ["Sym0", "Sym1", "Sym2"]
        assert len(report.files) <= LIST_CAP
        assert all(len(f) <= LIST_ITEM_CHARS for f in report.files)
        # recorded in the parent's pool; the worker's raw items are not
        parent_pool = engine.pool("primary")
        assert report.id in parent_pool.items
        assert not any(item.id in parent_pool.items for item in raw)
        sent = engine.build("primary").prompt.text
        assert "Summary: " in sent
        assert raw[-1].content not in sent
    finally:
        engine.close()


def test_a_worker_without_a_parent_cannot_report(tmp_path: Path) -> None:
    engine = open_engine(f"sqlite:///{tmp_path / 'ledger.db'}")
    try:
        engine.register_agent(AgentIdentity(agent_id="solo", role="worker"))
        with pytest.raises(InvalidInputError, match="no parent"):
            engine.report_to_parent("solo")
    finally:
        engine.close()


def test_a_short_report_is_not_cut(tmp_path: Path) -> None:
    """Under the caps nothing is clipped: every entry is kept whole, and replay rebuilds the
    parent's pool with the report (audit clean)."""
    store = f"sqlite:///{tmp_path / 'ledger.db'}"
    engine = open_engine(store)
    try:
        engine.register_agent(AgentIdentity(agent_id="primary", role="primary", budget=8_000))
        engine.register_agent(AgentIdentity(agent_id="worker", role="worker", parent="primary"))
        engine.record(
            "worker",
            "Root cause: parse_date drops the zone\n$ pytest tests/test_dates.py\n"
            "Risk: the cache key may be stale",
            files=("pkg/dates.py",),
        )
        report = engine.report_to_parent("worker")
        sections = _sections(report.content)
        assert "Summary: Root cause: parse_date drops the zone" in report.content
        assert sections["Files"] == ["pkg/dates.py", "tests/test_dates.py"]
        assert sections["Commands"] == ["pytest tests/test_dates.py"]
        assert sections["Risks"] == ["Risk: the cache key may be stale"]
        assert not any(v.endswith("…") for values in sections.values() for v in values)
    finally:
        engine.close()
    reopened = open_engine(store, must_exist=True)
    try:
        assert reopened.pool("primary").items[report.id].content == report.content
        assert audit([(r.position, r.event) for r in reopened.ledger.read_all()]) == []
    finally:
        reopened.close()
