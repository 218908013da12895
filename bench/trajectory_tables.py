"""Regenerate the `compare` tables and the reuse-against-recall frontier of
docs/trajectories.md from the shared runs.

    .venv/bin/python bench/trajectory_tables.py      (or: make docs-tables)

Runs the installed ``ctxledger compare`` on every file in ../shared/trajectories at the two
documented configurations and rewrites the block between the GENERATED markers, so the tables
are the command's own output, never typed by hand; the frontier block runs ``variable`` at
several watermarks, the baseline strategies and LangChain's own ``trim_messages`` (when
langchain-core is installed) through the same measures. Exits 1 with one line when the
shared runs are missing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "trajectories.md"
SHARED = ROOT.parent / "shared" / "trajectories"
FILES = (
    "swe-agent__gpt4__pydicom-1458.traj",
    "mini-swe-agent__deepseek-chat__django-14997.traj.json",
    "openhands__claude35sonnet__basic_gui_mode.json",
)
CONFIGS = (("8000", "12000"), ("32000", None))
STRATEGIES = (
    "variable,trim_last,keep_first_last,window,full_history,summary,aggressive_refresh,"
    "role_optimized,layered"
)
BEGIN = "<!-- BEGIN GENERATED: compare-tables (bench/trajectory_tables.py rewrites this block) -->"
END = "<!-- END GENERATED: compare-tables -->"
FRONTIER_BEGIN = (
    "<!-- BEGIN GENERATED: frontier (bench/trajectory_tables.py rewrites this block) -->"
)
FRONTIER_END = "<!-- END GENERATED: frontier -->"
WATERMARKS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.9)
PEERS = ("trim_last", "keep_first_last", "window")


def _block() -> str:
    cli = str(Path(sys.executable).parent / "ctxledger")
    parts: list[str] = []
    for name in FILES:
        for budget, window in CONFIGS:
            args = ["compare", f"../shared/trajectories/{name}", "--budget", budget]
            if window:
                args += ["--window", window]
            args += ["--strategies", STRATEGIES, "--store", "memory://"]
            done = subprocess.run(
                [cli, *args],
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=False,
                env={**os.environ, "COLUMNS": "200"},
            )
            if done.returncode != 0:
                raise SystemExit(f"trajectory_tables: {' '.join(args)}: {done.stderr.strip()}")
            table = done.stdout.split("\ngens: ")[0].rstrip()  # legend and store line omitted
            parts.append(f"```text\n$ ctxledger {' '.join(args)}\n{table}\n```")
    return "\n\n".join(parts)


def _frontier() -> str:
    """Per run and budget: ``variable`` at each watermark, the baselines, and LangChain's own
    ``trim_messages`` (bench/peers.py) — next-action recall against prefix reuse."""
    sys.path.insert(0, str(ROOT))
    from bench.peers import _append_only, _langchain, _score, langchain_available, transcript_of
    from ctxledger.adapters.importers import load_trajectory
    from ctxledger.adapters.simulation.simulate import simulate_trajectory
    from ctxledger.adapters.tokens import default_counter
    from ctxledger.domain.settings import DEFAULT_WATERMARK

    counter = default_counter()
    lines = [
        "| run | budget | policy | next-action recall (turn min) | instructions whole |"
        " order inv./obs. first | stale failures | reuse ÷ limit | generations |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in FILES:
        traj = load_trajectory(SHARED / name)
        short = name.split("__")[-1].split(".")[0]
        for budget in (8000, 32000):
            rows: list[tuple[str, object]] = []
            for w in WATERMARKS:
                r = simulate_trajectory(
                    traj, budget=budget, strategy="variable", store_url="memory://",
                    counter=counter, watermark=w,
                )  # fmt: skip
                mark = " (default)" if w == DEFAULT_WATERMARK else ""
                rows.append((f"variable, watermark {w:g}{mark}", r))
            for peer in PEERS:
                r = simulate_trajectory(
                    traj, budget=budget, strategy=peer, store_url="memory://", counter=counter
                )
                rows.append((peer, r))
            for label, r in rows:
                n = r.next_action_recall  # type: ignore[attr-defined]
                ratio = r.prefix_reuse / r.prefix_reuse_limit if r.prefix_reuse_limit else 0.0  # type: ignore[attr-defined]
                lines.append(
                    f"| {short} | {budget} | {label} | {_num(n.pooled)} ({_num(n.min)}) |"
                    f" {_num(r.instructions_whole)} |"  # type: ignore[attr-defined]
                    f" {r.order_inversions}/{r.observation_before_action} |"  # type: ignore[attr-defined]
                    f" {r.stale_failures_share:.4f} | {ratio:.3f} | {r.generations} |"  # type: ignore[attr-defined]
                )
            if langchain_available():
                t = transcript_of(traj, name)
                prompts, seconds = _langchain(t, budget, counter)
                got = _score(t, prompts, seconds, counter, budget)
                limit = _score(t, *_append_only(t), counter, budget)["prefix_reuse"]
                ratio = got["prefix_reuse"] / limit if limit else 0.0
                lines.append(
                    f"| {short} | {budget} | LangChain trim_messages(last) |"
                    f" {_num(got['next_action_recall'])} | {_num(got['instructions_whole'])} |"
                    f" in order | {got['stale_failures_share']:.4f} | {ratio:.3f} | — |"
                )
            else:
                lines.append(f"| {short} | {budget} | LangChain trim_messages | not installed |")
    return "\n".join(lines)


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.4f}"


def _rewrite(text: str, begin: str, end: str, block: str) -> str | None:
    head, sep, rest = text.partition(begin)
    _, sep2, tail = rest.partition(end)
    if not sep or not sep2:
        return None
    return f"{head}{begin}\n\n{block}\n\n{end}{tail}"


def main() -> int:
    missing = [f for f in FILES if not (SHARED / f).is_file()]
    if missing:
        sys.stderr.write(f"trajectory_tables: shared runs not found: {', '.join(missing)}\n")
        return 1
    text = DOC.read_text(encoding="utf-8")
    done = _rewrite(text, BEGIN, END, _block())
    done = done and _rewrite(done, FRONTIER_BEGIN, FRONTIER_END, _frontier())
    if not done:
        sys.stderr.write(f"trajectory_tables: markers not found in {DOC}\n")
        return 1
    DOC.write_text(done, encoding="utf-8")
    print(f"rewrote the compare tables and the frontier of {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
