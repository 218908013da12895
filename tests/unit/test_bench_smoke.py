"""The benchmark harness runs end to end at tiny sizes (so `make test` keeps it from rotting)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from bench import report
from bench.run import QUICK, run
from ctxledger.domain.strategies import strategy_names

TINY = dataclasses.replace(
    QUICK,
    name="tiny",
    sizes=(40, 80, 160),
    engine_sizes=(60,),
    repeat=3,
    max_seconds=1.0,
    template_agents=2,
    template_turns=6,
    ledger_events=120,
    per_turn_events=40,
    ledger_rounds=1,
    scale_events=200,
    growth_turns=12,
    long_steps=5,
    memory_pool=100,
    trajectories=False,
    openhands=False,
    scale_tenth=False,
    turn_sizes=(40, 80),
    session_turns=12,
    encryption_items=20,
    wide_events=300,
)
SECTIONS = ("turn", "build", "ledger", "scale", "growth", "peers", "memory", "encryption")


def test_tiny_run_writes_results_and_regenerates_the_doc(tmp_path: Path) -> None:
    doc = tmp_path / "performance.md"
    begin, end = report.markers("build")
    doc.write_text(f"# Perf\n\nhand-written text\n\n{begin}\nold figures\n{end}\n\ntail\n")
    out = tmp_path / "results.json"

    results = run(TINY, sections=SECTIONS, out=out, doc=doc, log=lambda _msg: None)

    for name in SECTIONS:
        assert "error" not in results[name], results[name]
    stored = json.loads(out.read_text())
    assert stored["config"]["name"] == "tiny"
    assert [r["items"] for r in stored["build"]["selection"]] == [40, 80, 160]
    assert stored["build"]["selection"][0]["limit"]["n"] >= 3
    assert [r["strategy"] for r in stored["build"]["strategies"]] == [
        "variable",
        *(s for s in strategy_names() if s != "variable"),
    ]
    assert {r["items"] for r in stored["build"]["strategies"]} == {160}
    assert stored["ledger"]["events"] == 120
    assert stored["ledger"]["wide"]["events"] == TINY.wide_events
    assert stored["ledger"]["wide"]["raw_replay_per_s"] > 0
    assert stored["scale"]["large"]["projections"]["events"] == 200
    assert stored["scale"]["large"]["read"]["peak_rss_mb"] > 0
    assert stored["growth"]["turns"] == 12
    rows = stored["peers"]["trajectories"][0]["rows"]
    assert "append-only transcript" in rows
    assert {f"ctxledger {s}" for s in strategy_names()} <= set(rows)
    assert rows["append-only transcript"]["objective"] == 1.0
    assert stored["memory"]["items"] == 100
    assert stored["encryption"]["items"] == 20
    assert stored["encryption"]["encrypted"]["events"] == stored["encryption"]["plain"]["events"]
    assert stored["encryption"]["encrypted"]["erase_s"] > 0
    names = {t["target"] for t in stored["targets"]}
    assert "batched append / raw sqlite3" in names
    assert "160 selection / limit pipeline, `layered`" in names
    assert any(n.startswith("replay / raw sqlite3 + msgspec (300 events, ") for n in names)

    text = doc.read_text()
    assert "hand-written text" in text
    assert text.rstrip().endswith(report.markers("memory")[1])
    assert "old figures" not in text
    assert text.count(begin) == 1
    assert "| pool items |" in text
    report.update_doc(doc, stored)  # a re-run replaces the blocks, never duplicates them
    assert doc.read_text().count(begin) == 1
    assert doc.read_text().count(report.markers("peers")[0]) == 1
