"""Tables for people on a terminal, plain columns everywhere else.

On a terminal a rich table (ids never wrapped); piped or redirected, the same table as plain
tab-separated lines — a ``# title`` line, the header, one line per row — so an id copied
from it is whole, numbers are never split over lines, and ``cut``/``awk`` read it."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = ["cli_console", "plain_lines", "show"]


def cli_console(*, stderr: bool = False) -> Console:
    """The console a command prints with: off a terminal, lines are never wrapped (a pipe
    gets whole lines, whatever ``COLUMNS`` says)."""
    console = Console(stderr=stderr)
    if not console.is_terminal:
        console.soft_wrap = True
    return console


def _plain(cell: object) -> str:
    if isinstance(cell, Text):
        text = cell.plain
    elif isinstance(cell, str):
        text = Text.from_markup(cell).plain
    else:
        text = str(cell)
    return " ".join(text.split()) if ("\t" in text or "\n" in text) else text


def plain_lines(table: Table) -> list[str]:
    """*table* as plain lines: ``# title``, the tab-separated header, one line per row."""
    lines = [f"# {_plain(table.title)}"] if table.title else []
    lines.append("\t".join(_plain(c.header) for c in table.columns))
    columns = [list(c.cells) for c in table.columns]
    lines.extend("\t".join(_plain(cell) for cell in row) for row in zip(*columns, strict=True))
    return lines


def show(console: Console, table: Table) -> None:
    """Print *table*: drawn on a terminal, plain columns on a pipe or in a file."""
    if console.is_terminal:
        console.print(table)
        return
    out = console.file  # written as is: rich would expand the tabs
    out.write("".join(line + "\n" for line in plain_lines(table)))
    out.flush()
