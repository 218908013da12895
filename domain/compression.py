"""Heuristic compression: section extraction and head/tail truncation, never a semantic summary.

Every result names its method (``extract:pytest``, ``extract:traceback``, ``extract:signals``,
``head_tail``) and starts with a bracketed note saying how many lines were omitted, so a reader
knows the text is an excerpt of the original, not a paraphrase of it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime

import msgspec

from ctxledger.domain.memo import memo_table, remember
from ctxledger.domain.model import Durability, Item, Layer, Source, item_id_for

__all__ = [
    "LIST_CAP",
    "LIST_ITEM_CHARS",
    "SUMMARY_CHARS",
    "Compressed",
    "ParentReport",
    "compress_report",
    "compress_text",
    "extract_pytest",
    "extract_signals",
    "extract_traceback",
    "head_tail_lines",
]

SUMMARY_CHARS = 1200
LIST_CAP = 20
LIST_ITEM_CHARS = 200
_MIN_LINES = 12  # texts shorter than this are not worth extracting from
_MAX_KEPT_LINES = 80
_MAX_LINE_CHARS = 400
_MEMO_MAX = 4_096


class Compressed(msgspec.Struct, frozen=True):
    """An excerpt of a text and the method that produced it."""

    text: str
    method: str


# --- line classifiers ---------------------------------------------------------------------

_PYTEST_MARK = re.compile(
    r"^(?:FAILED |ERROR |=+ (?:FAILURES|ERRORS|short test summary info) =+"
    r"|=+ [^\n]{0,200}?\b(?:failed|passed|errors?)\b[^\n]{0,200} =+$)",
    re.MULTILINE,
)
_PYTEST_KEEP = re.compile(
    r"""^(?:
        (?:FAILED|ERROR|XPASS|XFAIL)\s+\S+.*        # short summary lines
      | E\s{2,}\S.*                               # assertion / exception lines
      | _{3,}\s.*\s_{3,}                          # ____ test_name ____ headers
      | =+\s.*\s=+                                # section and final summary bars
      | [^\s:][^:]*\.py:\d+:(?:\s.*)?            # tests/test_x.py:42: AssertionError
      | ERROR\ collecting\ .*
    )$""",
    re.VERBOSE,
)
_TB_START = "Traceback (most recent call last):"
_TB_FRAME = re.compile(r'^\s*File "[^"]+", line \d+(?:, in \S+)?')
_EXC_LINE = re.compile(
    r"^(?:[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Fault)\b.*|[A-Za-z_][\w.]*: .*)$"
)
_CHAINED = re.compile(
    r"^(?:During handling of the above exception|The above exception was the direct cause)"
)
_SIGNAL = re.compile(
    r"""(?ix)
      \b(?:decid\w*|decision|must|never|always|constraint|require\w*|root\ cause|because
          |fail\w*|error|exception|traceback|assert\w*|risk\w*|todo|fixme|unresolved|open\ question
          |verif\w*|pytest|make\ |npm\ |cargo\ |go\ test|mypy|ruff|passed|blocked|warning)\b
      | ^\s*(?:\$|>>>|\#\s)\s*\S
      | (?<![\w./-])[\w./-]+\.[A-Za-z]{1,8}:\d+
      | (?:^|\s)[\w.-]+/[\w./-]+\.[A-Za-z]{1,8}\b
    """
)


def _cut(line: str) -> str:
    return line if len(line) <= _MAX_LINE_CHARS else line[: _MAX_LINE_CHARS - 1] + "…"


def _note(method: str, kept: int, total: int) -> str:
    return f"[{method} excerpt: {kept} of {total} lines kept, {total - kept} omitted]"


def _finish(method: str, lines: Sequence[str], kept_idx: Iterable[int]) -> Compressed | None:
    idx = sorted(set(kept_idx))
    if not idx:
        return None
    if len(idx) > _MAX_KEPT_LINES:
        half = _MAX_KEPT_LINES // 2
        idx = idx[:half] + idx[-half:]
    out: list[str] = [_note(method, len(idx), len(lines))]
    prev = -1
    for i in idx:
        if prev >= 0 and i != prev + 1:
            out.append("…")
        out.append(_cut(lines[i]))
        prev = i
    return Compressed("\n".join(out), method)


def extract_pytest(text: str) -> Compressed | None:
    """Keep failing test ids, ``E`` lines, ``file.py:N:`` locations, headers and summaries."""
    if not _PYTEST_MARK.search(text):
        return None
    lines = text.splitlines()
    keep: list[int] = []
    e_run = 0
    for i, line in enumerate(lines):
        if not _PYTEST_KEEP.match(line):
            e_run = 0
            continue
        if line.startswith("E "):
            e_run += 1
            if e_run > 6:  # long assertion diffs: first lines name the error
                continue
        else:
            e_run = 0
        keep.append(i)
    # Tracebacks printed inside pytest output (e.g. collection errors) keep their tail too.
    tb = _traceback_indices(lines)
    return _finish("extract:pytest", lines, [*keep, *tb])


def _traceback_indices(lines: Sequence[str], frames: int = 3) -> list[int]:
    starts = [i for i, line in enumerate(lines) if line.strip() == _TB_START]
    keep: list[int] = []
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        keep.append(start)
        frame_idx = [i for i in range(start + 1, end) if _TB_FRAME.match(lines[i])]
        last = n == len(starts) - 1
        for fi in frame_idx[-frames:] if last else frame_idx[-1:]:
            keep.append(fi)
            if fi + 1 < end and not _TB_FRAME.match(lines[fi + 1]):
                keep.append(fi + 1)  # the source line of the frame
        after = frame_idx[-1] + 1 if frame_idx else start + 1
        for i in range(after, end):
            s = lines[i]
            if s and not s[0].isspace() and _EXC_LINE.match(s):
                keep.append(i)
                # following non-indented continuation lines of the message
                j = i + 1
                while j < min(end, i + 4) and lines[j] and not _CHAINED.match(lines[j]):
                    keep.append(j)
                    j += 1
                break
        # "During handling of the above exception…" between this traceback and the next
        keep.extend(i for i in range(start + 1, end) if _CHAINED.match(lines[i]))
    return keep


def extract_traceback(text: str) -> Compressed | None:
    """Keep each ``Traceback`` line, the last frames (``File "…", line N, in fn`` + source)
    and the final exception line; chained tracebacks keep their last frame and exception."""
    if _TB_START not in text:
        return None
    lines = text.splitlines()
    return _finish("extract:traceback", lines, _traceback_indices(lines))


def extract_signals(text: str) -> Compressed | None:
    """Keep lines naming decisions, constraints, failures, commands, risks, paths, symbols;
    plus the first and last three lines for orientation."""
    lines = text.splitlines()
    if len(lines) < _MIN_LINES:
        return None
    keep = [i for i, line in enumerate(lines) if _SIGNAL.search(line)]
    if not keep:
        return None
    return _finish("extract:signals", lines, [0, 1, 2, *keep, *range(len(lines) - 3, len(lines))])


def head_tail_lines(text: str, keep: int = 20) -> Compressed | None:
    """The first and last *keep* lines, with the omitted line count in the middle."""
    lines = text.splitlines()
    if len(lines) <= 2 * keep + 1:
        return None
    omitted = len(lines) - 2 * keep
    body = [*map(_cut, lines[:keep]), f"[… {omitted} lines omitted …]", *map(_cut, lines[-keep:])]
    return Compressed("\n".join(body), "head_tail")


_memo: dict[str, Compressed | None] = memo_table()


def compress_text(text: str) -> Compressed | None:
    """The best excerpt of *text* (pytest → traceback → signals → head/tail), or ``None``
    when no method makes it at least a quarter shorter. Memoised by text."""
    if text in _memo:
        return _memo[text]
    result: Compressed | None = None
    if text.count("\n") + 1 >= _MIN_LINES:
        for method in (extract_pytest, extract_traceback, extract_signals, head_tail_lines):
            c = method(text)
            if c is not None and len(c.text) <= 0.75 * len(text):
                result = c
                break
    return remember(_memo, text, result, _MEMO_MAX)


# --- parent reports -------------------------------------------------------------------------


class ParentReport(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A worker transcript reduced to a report for its parent; every field is capped."""

    agent: str = ""
    task: str = ""
    summary: str = ""
    files: tuple[str, ...] = ()
    symbols: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()
    risks: tuple[str, ...] = ()
    source_items: int = 0

    def render(self) -> str:
        who = f" from {self.agent}" if self.agent else ""
        on = f" on task {self.task}" if self.task else ""
        out = [
            f"Parent report{who}{on} (heuristic excerpt of {self.source_items} transcript "
            "items, not a summary; verify before relying on it)",
            f"Summary: {self.summary}" if self.summary else "Summary: (none extracted)",
        ]
        for label, values in (
            ("Files", self.files),
            ("Symbols", self.symbols),
            ("Commands", self.commands),
            ("Risks", self.risks),
        ):
            if values:
                out.append(f"{label}:")
                out.extend(f"- {v}" for v in values)
        return "\n".join(out)


_COMMAND = re.compile(
    r"^\s*(?:\$\s+(?P<a>\S.*)|(?P<b>(?:python -m |\.venv/bin/)?(?:pytest|mypy|ruff|make|npm|"
    r"pnpm|yarn|cargo|go (?:test|build|vet)|tox|nox|git (?:diff|status|log|apply))\b.*))$"
)
_RISK = re.compile(
    r"(?i)\b(?:risk\w*|todo|fixme|unresolved|not yet|open question|follow[- ]up|caveat"
    r"|might break|untested|flaky|regress\w*)\b"
)
_KEY = re.compile(
    r"(?i)\b(?:decid\w*|decision|root cause|because|fix(?:ed|es)?|chang(?:ed|es)|implement\w*"
    r"|added|removed|renamed|fail\w*|error|passed|verif\w*|constraint|must)\b"
)
_SYMBOL = re.compile(r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+\(\)|\b[A-Za-z_]\w*\(\)|`([^`\s]{2,80})`")
_FILE = re.compile(
    r"(?<![\w/.-])(?:[\w.-]+/)*[\w.-]+\.(?:py|pyi|js|ts|tsx|go|rs|java|kt|rb|c|h|cpp|hpp|cs|toml|yaml|yml|json|md|cfg|ini|sql|sh)\b"
)


def _cap(
    values: Iterable[str], count: int = LIST_CAP, chars: int = LIST_ITEM_CHARS
) -> tuple[str, ...]:
    out: list[str] = []
    seen: set[str] = set()
    for v in values:
        v = " ".join(v.split())
        if not v or v in seen:
            continue
        seen.add(v)
        out.append(v if len(v) <= chars else v[: chars - 1] + "…")
        if len(out) >= count:
            break
    return tuple(out)


def _cap_summary(lines: Iterable[str], limit: int = SUMMARY_CHARS) -> str:
    parts: list[str] = []
    size = 0
    for line in lines:
        line = " ".join(line.split())
        if not line or line in parts:
            continue
        extra = len(line) + (2 if parts else 0)
        if size + extra > limit:
            room = limit - size - (2 if parts else 0)
            if room > 20:
                parts.append(line[: room - 1] + "…")
            break
        parts.append(line)
        size += extra
    return "; ".join(parts)[:limit]


def compress_report(
    transcript_items: Sequence[Item],
    *,
    agent: str = "",
    task: str = "",
    observed_at: datetime | None = None,
) -> Item:
    """Turn a worker transcript (items in transcript order) into one ``parent_report`` item.

    Extracts decisions, failures and verification lines into the summary (≤ 1200 chars) and
    files, symbols, commands and risks into lists (≤ 20 entries of ≤ 200 chars each). The
    result is an L2 finding, unverified, with a content-addressed id.
    """
    agent = agent or next((i.agent for i in transcript_items if i.agent), "")
    task = task or next((i.task for i in transcript_items if i.task), "")
    if observed_at is None:
        stamps = [i.observed_at for i in transcript_items if i.observed_at is not None]
        observed_at = max(stamps) if stamps else None
    key_lines: list[str] = []
    files: list[str] = []
    symbols: list[str] = []
    commands: list[str] = []
    risks: list[str] = []
    for item in transcript_items:
        files.extend(item.files)
        symbols.extend(item.symbols)
        text = item.content
        c = compress_text(text)
        lines = (c.text if c is not None else text).splitlines()
        for line in lines:
            stripped = line.strip()
            if not stripped or (stripped.startswith("[") and stripped.endswith("]")):
                continue
            m = _COMMAND.match(line)
            if m:
                commands.append(m.group("a") or m.group("b") or stripped)
            if _RISK.search(stripped):
                risks.append(stripped)
            elif _KEY.search(stripped):
                key_lines.append(stripped)
            files.extend(_FILE.findall(stripped))
            for sm in _SYMBOL.finditer(stripped):
                symbols.append(sm.group(1) or sm.group(0))
    report = ParentReport(
        agent=agent,
        task=task,
        summary=_cap_summary(key_lines),
        files=_cap(files),
        symbols=_cap(symbols),
        commands=_cap(commands),
        risks=_cap(risks),
        source_items=len(transcript_items),
    )
    content = report.render()
    return Item(
        id=item_id_for(Layer.L2, Source.PARENT_REPORT, content),
        layer=Layer.L2,
        source=Source.PARENT_REPORT,
        content=content,
        agent=agent,
        task=task,
        observed_at=observed_at,
        durability=Durability.SESSION,
        verified=False,
        files=report.files,
        symbols=report.symbols,
    )
