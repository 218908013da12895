"""Regenerate the `compare` tables of docs/trajectories.md from the shared runs.

    .venv/bin/python bench/trajectory_tables.py      (or: make docs-tables)

Runs the installed ``ctxledger compare`` on every file in ../shared/trajectories at the two
documented configurations and rewrites the block between the GENERATED markers, so the tables
are the command's own output, never typed by hand. Exits 1 with one line when the shared runs
are missing.
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
STRATEGIES = "variable,full_history,summary,aggressive_refresh,role_optimized,layered"
BEGIN = "<!-- BEGIN GENERATED: compare-tables (bench/trajectory_tables.py rewrites this block) -->"
END = "<!-- END GENERATED: compare-tables -->"


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


def main() -> int:
    missing = [f for f in FILES if not (SHARED / f).is_file()]
    if missing:
        sys.stderr.write(f"trajectory_tables: shared runs not found: {', '.join(missing)}\n")
        return 1
    text = DOC.read_text(encoding="utf-8")
    head, sep, rest = text.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        sys.stderr.write(f"trajectory_tables: markers not found in {DOC}\n")
        return 1
    DOC.write_text(f"{head}{BEGIN}\n\n{_block()}\n\n{END}{tail}", encoding="utf-8")
    print(f"rewrote the compare tables of {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
