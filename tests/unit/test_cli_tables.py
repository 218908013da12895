"""Tables on a terminal and off it (adapters/cli/tables.py)."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ctxledger.adapters.cli.tables import (
    DISPLAY_LIMIT,
    cli_console,
    plain_lines,
    show,
    shown,
    visible,
)


def _table() -> Table:
    t = Table(title="items (2)")
    t.add_column("id")
    t.add_column("tokens")
    t.add_column("preview")
    t.add_row("it_" + "a" * 24, "12", Text.from_markup("[bold]first[/bold] line\nsecond\tline"))
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


def test_a_string_cell_is_data_not_markup() -> None:
    t = Table(title="t")
    t.add_column("reason")
    t.add_row("[/INST] [red]x[/red]")
    assert plain_lines(t) == ["# t", "reason", "[/INST] [red]x[/red]"]


def test_visible_shows_controls_escapes_and_surrogates_and_cuts_long_text() -> None:
    assert visible("a\x1b[31mb\n\t\x00\x7f") == "a\u241b[31mb\u240a\u2409\u2400\u2421"
    assert visible("\x9b\u202e\ud800") == "\\x9b\\u202e\\ud800"
    assert visible("[/INST] :smile:") == "[/INST] :smile:"
    assert visible("x" * (DISPLAY_LIMIT + 5)) == "x" * DISPLAY_LIMIT + "… [+5 chars]"
    assert visible("x" * 10, 4) == "xxxx… [+6 chars]"
    assert visible("y" * 1000, None) == "y" * 1000
    assert shown("[b]\x1b").plain == "[b]\u241b"


def test_the_cli_console_prints_strings_as_they_are() -> None:
    out = io.StringIO()
    console = cli_console()
    console.file = out
    console.print("[/INST] [red]x[/red] :smile: 12 None")
    assert out.getvalue() == "[/INST] [red]x[/red] :smile: 12 None\n"
