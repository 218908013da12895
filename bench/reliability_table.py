"""Print the reliability figures of the last run as the Markdown table of docs/reliability.md.

Usage: ``python bench/reliability_table.py [short|long]`` (reads
``.ctxledger/reliability/figures-<size>.json``, written by ``tests/reliability``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def table(size: str) -> str:
    path = ROOT / ".ctxledger" / "reliability" / f"figures-{size}.json"
    rows = json.loads(path.read_text(encoding="utf-8"))
    out = ["| test | scale | result | re-run |", "|---|---|---|---|"]
    for name in sorted(rows):
        row = rows[name]
        cells = [row["test"], row["scale"], row["result"], f"`{row['rerun']}`"]
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    print(table(sys.argv[1] if len(sys.argv) > 1 else "short"))
