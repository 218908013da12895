"""The ``secrets`` benchmark section runs at a tiny size and renders its block."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from bench import report
from bench.run import QUICK, run

TINY = dataclasses.replace(QUICK, name="tiny", repeat=1, secret_kib=8, trajectories=False)


def test_secrets_section_measures_the_scan_and_renders(tmp_path: Path) -> None:
    doc = tmp_path / "performance.md"
    out = tmp_path / "results.json"
    results = run(TINY, sections=("secrets",), out=out, doc=doc, log=lambda _msg: None)
    section = results["secrets"]
    assert "error" not in section, section
    stored = json.loads(out.read_text())["secrets"]
    assert [row["text"] for row in stored["rows"]] == ["code", "logs", "credential-word config"]
    for row in stored["rows"]:
        assert row["kib"] >= 8
        assert row["flagged"] == 0  # none of the generated texts holds a credential
        assert row["scan_ms_per_kib"] > 0
        assert row["unfiltered_ms_per_kib"] > 0
    assert stored["record_redact_ms"] > 0
    assert stored["record_allow_ms"] > 0
    text = doc.read_text()
    begin, end = report.markers("secrets")
    block = text[text.index(begin) : text.index(end)]
    assert "| code |" in block
    assert f"**{stored['record_redact_ms']} ms**" in block
