"""Tables on a terminal and off it (adapters/cli_tables.py)."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ctxledger.adapters.cli_tables import plain_lines, show


def _table() -> Table:
    t = Table(title="items (2)")
    t.add_column("id")
    t.add_column("tokens")
    t.add_column("preview")
    t.add_row("it_" + "a" * 24, "12", "[bold]first[/bold] line\nsecond\tline")
    t.add_row(Text("it_" + "b" * 24), "7", "")
    return t


def test_plain_lines_are_title_header_and_one_tab_separated_line_per_row() -> None:
    assert plain_lines(_table()) == [
        "# items (2)",
        "id\ttokens\tpreview",
        "it_" + "a" * 24 + "\t12\tfirst line second line",
        "it_" + "b" * 24 + "\t7\t",
    ]


def test_show_draws_on_a_terminal_and_prints_plain_columns_elsewhere() -> None:
    piped = io.StringIO()
    show(Console(file=piped, width=20, force_terminal=False), _table())
    assert piped.getvalue().splitlines() == plain_lines(_table())
    drawn = io.StringIO()
    show(Console(file=drawn, width=120, force_terminal=True), _table())
    assert "┃" in drawn.getvalue()
    assert "it_" + "a" * 24 in drawn.getvalue()
