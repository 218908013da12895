"""Tables for people on a terminal, plain columns everywhere else.

On a terminal a rich table (ids never wrapped); piped or redirected, the same table as plain
tab-separated lines — a ``# title`` line, the header, one line per row — so an id copied
from it is whole, numbers are never split over lines, and ``cut``/``awk`` read it."""

from __future__ import annotations

import re
from typing import Final

from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = ["DISPLAY_LIMIT", "cli_console", "plain_lines", "shown", "show", "visible"]

DISPLAY_LIMIT: Final = 300
"""Characters of one piece of agent text a view shows; the rest is named by a marker."""

_PICTURES: Final = {c: chr(0x2400 + c) for c in range(0x20)} | {0x7F: "\u2421"}
"""C0 control characters as their Unicode control pictures (ESC as ␛, a newline as ␊)."""


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x20 or code == 0x7F:
        return _PICTURES[code]
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


_HIDDEN: Final = re.compile(
    "[\\x00-\\x1f\\x7f-\\x9f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u2069\\ufeff\\ud800-\\udfff]"
)
"""Characters a terminal would act on or hide instead of showing: C0 and C1 controls (ESC
starts an ANSI sequence), DEL, zero-width and bidirectional marks, line and paragraph
separators, and lone surrogates (which no terminal encoding can write)."""


def visible(text: str, limit: int | None = DISPLAY_LIMIT) -> str:
    """Agent text as a terminal may show it: every character a terminal would act on made
    visible (``\\x1b`` as ``␛``, a newline as ``␊``, C1 controls, bidi marks and lone
    surrogates as ``\\x9b``/``\\u202e``/``\\udc80``), and past *limit* characters cut, with
    a marker saying how many were left out. Data, never markup: print it with markup off."""
    cut = ""
    if limit is not None and len(text) > limit:
        cut = f"… [+{len(text) - limit} chars]"
        text = text[:limit]
    return _HIDDEN.sub(lambda m: _escape(m.group()), text) + cut


def shown(text: object, limit: int | None = DISPLAY_LIMIT) -> Text:
    """*text* (agent data: an id, a role, a task, a reason, an error) as a rich Text that is
    never parsed as markup nor highlighted: see ``visible``."""
    return Text(visible(str(text), limit))


def cli_console(*, stderr: bool = False, markup: bool = False) -> Console:
    """The console a command prints with: markup and highlighting off (a string printed is
    shown as it is, so agent text such as ``[/INST]`` is data; styles are given as rich
    Text), and off a terminal lines are never wrapped (a pipe gets whole lines, whatever
    ``COLUMNS`` says). *markup* on only for text the program wrote itself (the demo)."""
    console = Console(stderr=stderr, markup=markup, highlight=False, emoji=False)
    if not console.is_terminal:
        console.soft_wrap = True
    return console


def _plain(cell: object) -> str:
    # a string cell is shown as it is (the consoles parse no markup)
    text = cell.plain if isinstance(cell, Text) else str(cell)
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
