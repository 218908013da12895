"""The working set: what the steps a generation's first pack leaves out touched, in one item.

A rebuild or a refresh drops old steps; dropped with nothing left behind, the files the agent
fixed, the commands it ran and the failures it already fixed vanish from its view (the next
action then names a file the prompt never mentions). So a generation's first pack extracts,
heuristically and with provenance (each entry names its step), a compact task-state item
from the steps it does not show:

- the files they viewed or edited, each with its latest state and step;
- the commands they ran and each one's last result;
- failures with their status: ``fixed`` once a later run of the same command passed, else
  ``open``;
- the names (paths, dotted names, code-like words, called names) their commands used.

Pure and deterministic: the same history and the same pack give the same item, so replay,
``audit --rederive`` and the live engine agree. The item leads the GENERATION segment
(``domain.prompt``) and a newer one supersedes it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence

import msgspec

from ctxledger.domain.identifiers import identifiers
from ctxledger.domain.model import Durability, Item, Layer, Source, content_hash

__all__ = [
    "WORKING_SET_SOURCE_ID",
    "is_working_set",
    "working_set_item",
    "working_set_text",
]

WORKING_SET_SOURCE_ID = "working-set"
"""``Item.source_id`` of a working-set item (its source is ``generated_summary``)."""

_MAX_FILES = 24
_MAX_COMMANDS = 10
_MAX_FAILURES = 8
_MAX_NAMES = 320
_NAMED_STEPS = 200  # the newest hidden steps whose commands are read for names
_COMMAND_CHARS = 72
_EDIT = re.compile(
    r"\bsed\s+-i|\bedit\b|str_replace|\bcreate\b|\bapply_patch\b|\bpatch\b|\bgit\s+apply\b"
    r"|\binsert\b|\bwrite\b|(?<![0-9&>])>>?(?!&)|<<",
    re.IGNORECASE,
)


def is_working_set(item: Item) -> bool:
    """Whether *item* is a working-set item."""
    return item.source is Source.GENERATED_SUMMARY and item.source_id == WORKING_SET_SOURCE_ID


def _short(command: str) -> str:
    one = " ".join(command.split())
    return one if len(one) <= _COMMAND_CHARS else one[: _COMMAND_CHARS - 1] + "…"


def _step(item: Item) -> str:
    return item.group or item.stage or item.id[:16]


def working_set_text(history: Collection[Item], shown: Collection[str], *, limit: int = 0) -> str:
    """The working set of the step items of *history* (recording order; items with a
    ``group``) whose ids are not in *shown*; ``""`` when every step is shown. *limit* > 0
    caps the text at that many characters, shortening the name list first, then the other
    lists (newest entries are kept)."""
    steps = [it for it in history if it.group and not is_working_set(it)]
    hidden = [it for it in steps if it.id not in shown]
    if not hidden:
        return ""
    hidden_groups = dict.fromkeys(it.group for it in hidden)
    shown_groups = {it.group for it in steps if it.id in shown}
    files, commands, failures = _latest_states(steps, hidden)
    names = _names_used(hidden, files)
    first, last = next(iter(hidden_groups)), next(reversed(hidden_groups))
    head = (
        f"Working set of {len(hidden_groups)} earlier step(s) not shown ({first} … {last});"
        f" {len(shown_groups)} shown in full below. Newest first."
    )
    lists = (files, commands, failures, names)
    sizes = [_MAX_FILES, _MAX_COMMANDS, _MAX_FAILURES, _MAX_NAMES]
    text = _render(head, lists, sizes)
    while limit and len(text) > limit and any(sizes):
        # shorten one list by a quarter: the commands first (their files and names are
        # listed too), then the longer of the names and the files, then the failures
        at = next((k for k in (1, 3 if sizes[3] >= sizes[0] else 0, 0, 3, 2) if sizes[k]), 2)
        sizes[at] = sizes[at] * 3 // 4 if sizes[at] > 3 else 0
        text = _render(head, lists, sizes)
    if limit and len(text) > limit:
        return ""
    return text


def _latest_states(
    steps: Sequence[Item], hidden: Sequence[Item]
) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """What the *hidden* steps touched, newest first, as ``(files, commands, failures)``:
    what each file last went through (edited, viewed or seen, and in which step), what each
    command last gave, and whether each failure is ``fixed`` (a later passing run of the
    same command, over the whole history: *steps*, shown ones included) or still open."""
    position = {it.id: n for n, it in enumerate(steps)}
    last_pass: dict[str, tuple[int, str]] = {}
    for n, it in enumerate(steps):
        if it.tool_signature and not it.failure and it.source is not Source.CONVERSATION:
            last_pass[it.tool_signature] = (n, _step(it))
    files: dict[str, str] = {}
    commands: dict[str, str] = {}
    failures: dict[str, str] = {}
    for it in reversed(hidden):
        step = _step(it)
        edited = bool(it.tool_signature and _EDIT.search(it.tool_signature))
        for f in it.files:
            if f not in files and not f.startswith("/tmp/"):
                verb = (
                    "edited"
                    if edited
                    else ("viewed" if it.source is Source.REPOSITORY_SOURCE else "seen")
                )
                files[f] = f"{verb} {step}"
        sig = it.tool_signature
        if sig and it.source is not Source.CONVERSATION and sig not in commands:
            commands[sig] = f"{'failed' if it.failure else 'ok'} {step}"
        if it.failure and sig and sig not in failures:
            fixed = last_pass.get(sig)
            failures[sig] = (
                f"fixed: failed {step}, passed {fixed[1]}"
                if fixed is not None and fixed[0] > position[it.id]
                else f"open since {step}"
            )
    return files, commands, failures


def _names_used(hidden: Sequence[Item], files: Collection[str]) -> dict[str, None]:
    """The names the *hidden* steps used (their commands, the symbols of their output; not
    the *files*), most used first (by how many steps used each), then the newest first."""
    uses: dict[str, int] = {}
    named = 0
    for it in reversed(hidden):
        if it.source is not Source.CONVERSATION:
            found: Sequence[str] = it.symbols
        elif named < _NAMED_STEPS:
            named += 1
            found = identifiers(it.content)
        else:
            continue
        for name in found:
            if name not in files:
                uses[name] = uses.get(name, 0) + 1
    recency = {name: n for n, name in enumerate(uses)}
    return dict.fromkeys(sorted(uses, key=lambda n: (-uses[n], recency[n])))


def _render(
    head: str,
    lists: tuple[dict[str, str], dict[str, str], dict[str, str], dict[str, None]],
    sizes: Sequence[int],
) -> str:
    """The working set's text: *head*, then the first *sizes* entries of each of the
    *lists* (files, commands, failures, names), an empty list or size leaving its line out."""
    files, commands, failures, names = lists
    n_files, n_commands, n_failures, n_names = sizes
    lines = [head]
    if files and n_files:
        lines.append("files: " + " · ".join(f"{f} ({s})" for f, s in list(files.items())[:n_files]))
    if commands and n_commands:
        lines.append(
            "commands, last result: "
            + " · ".join(f"`{_short(c)}` {s}" for c, s in list(commands.items())[:n_commands])
        )
    if failures and n_failures:
        lines.append(
            "failures: "
            + " · ".join(f"`{_short(c)}` {s}" for c, s in list(failures.items())[:n_failures])
        )
    if names and n_names:
        lines.append("names used: " + ", ".join(list(names)[:n_names]))
    return "\n".join(lines)


def working_set_item(
    history: Collection[Item],
    shown: Collection[str],
    *,
    agent: str,
    token_budget: int,
    count: Callable[[Item], int],
) -> Item | None:
    """The working-set item of a pack that shows *shown* of *history*, within
    *token_budget* tokens as *count* (an item's rendered tokens) says; None when every step
    is shown or not even its head fits."""
    if token_budget <= 0:
        return None
    limit = token_budget * 4
    while limit >= 64:
        text = working_set_text(history, shown, limit=limit)
        if not text:
            return None
        item = Item(
            id="ws." + content_hash(text)[:24],
            layer=Layer.L1,
            source=Source.GENERATED_SUMMARY,
            content=text,
            agent=agent,
            durability=Durability.DURABLE,
            source_id=WORKING_SET_SOURCE_ID,
        )
        tokens = count(item)
        if tokens <= token_budget:
            return msgspec.structs.replace(item, token_count=tokens)
        limit = limit * token_budget // tokens - 8
    return None
