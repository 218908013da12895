"""Views of a text that undo the disguises a credential hides behind, mapped back to it.

A token pasted from a chat or a terminal may carry characters no pattern expects: fullwidth
or other compatibility forms (NFKC), Cyrillic or Greek letters that look Latin, zero-width
joiners and soft hyphens, percent-encoding, hex encoding, or spaces every few characters. The
scanner (``adapters.secret_scan``) runs its rules on each view as well as on the text, and a
finding in a view is mapped back to the span of the original text it came from, so redaction
removes the disguised value itself.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from typing import NamedTuple

__all__ = ["View", "despaced", "hex_runs", "normalized", "percent_decoded"]

# Letters of other scripts drawn like ASCII ones (Unicode's confusables, the common subset).
_CONFUSABLES = str.maketrans(
    {
        **dict(zip("АВЕКМНОРСТХУІЈЅ", "ABEKMHOPCTXYIJS", strict=True)),
        **dict(zip("аеорсухіјѕԁԛԝһ", "aeopcyxijsdqwh", strict=True)),
        **dict(zip("ΑΒΕΖΗΙΚΜΝΟΡΤΥΧ", "ABEZHIKMNOPTYX", strict=True)),
        **dict(zip("οικνρτυχ", "oikvptux", strict=True)),
    }
)


class _Builder:
    """Builds a view: copied slices map one to one, rewritten characters to their source."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.starts: list[int] = []
        self.ends: list[int] = []

    def copy(self, text: str, start: int, end: int) -> None:
        if end > start:
            self.parts.append(text[start:end])
            self.starts.extend(range(start, end))
            self.ends.extend(range(start + 1, end + 1))

    def put(self, chars: str, start: int, end: int) -> None:
        self.parts.append(chars)
        self.starts.extend([start] * len(chars))
        self.ends.extend([end] * len(chars))

    def view(self) -> View:
        return View("".join(self.parts), self.starts, self.ends)


class View(NamedTuple):
    """A rewritten text and, for each of its characters, the original span it came from."""

    text: str
    starts: list[int]
    ends: list[int]

    def original(self, start: int, end: int) -> tuple[int, int]:
        """The original span of ``text[start:end]`` (a non-empty span)."""
        return self.starts[start], self.ends[end - 1]


def normalized(text: str) -> View | None:
    """*text* with invisible format characters (zero-width, soft hyphen, BOM…) removed, look-
    alike letters made ASCII and every other character in its NFKC form; None when that
    changes nothing (an ASCII text never changes)."""
    if text.isascii():
        return None
    out = _Builder()
    last = 0
    changed = False
    for run in _NON_ASCII.finditer(text):
        out.copy(text, last, run.start())
        for i in range(run.start(), run.end()):
            ch = text[i]
            if unicodedata.category(ch) == "Cf":
                changed = True
                continue
            mapped = ch.translate(_CONFUSABLES)
            if mapped == ch:
                mapped = unicodedata.normalize("NFKC", ch)
            changed = changed or mapped != ch
            out.put(mapped, i, i + 1)
        last = run.end()
    out.copy(text, last, len(text))
    return out.view() if changed else None


_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
_PERCENT = re.compile(r"(?:%[0-9A-Fa-f]{2})+")


def percent_decoded(text: str) -> View | None:
    """*text* with percent-escapes of printable ASCII decoded; None when it has none."""
    if "%" not in text:
        return None
    out = _Builder()
    last = 0
    changed = False
    for match in _PERCENT.finditer(text):
        out.copy(text, last, match.start())
        for k in range(match.start(), match.end(), 3):
            code = int(text[k + 1 : k + 3], 16)
            if 0x21 <= code <= 0x7E:
                out.put(chr(code), k, k + 3)
                changed = True
            else:
                out.copy(text, k, k + 3)  # not part of a token: kept as it is
        last = match.end()
    out.copy(text, last, len(text))
    return out.view() if changed else None


_HEX_RUN = re.compile(r"(?<![0-9A-Za-z])(?:[0-9a-fA-F]{2}){16,}(?![0-9A-Za-z])")


def hex_runs(text: str, *, limit: int = 64) -> Iterator[tuple[int, int, str]]:
    """``(start, end, decoded)`` for runs of 32+ hex digits that decode to printable ASCII
    (a git hash or a digest decodes to bytes that are not, and is skipped)."""
    for n, match in enumerate(_HEX_RUN.finditer(text)):
        if n >= limit:
            return
        raw = bytes.fromhex(match.group())
        if all(0x20 <= b <= 0x7E for b in raw):
            yield match.start(), match.end(), raw.decode("ascii")


_SHAPED_PREFIX = re.compile(
    r"github_pat_|gh[pousr]_|sk-|xox[abposr]-|A[KSBC][IC]A|AIza|eyJ|[rs]k_live_"
)
_GROUP = re.compile(r"[A-Za-z0-9_-]+")
_MAX_GROUPS = 40
_MAX_SPACED = 400


def _spaced_end(text: str, start: int) -> tuple[int, int]:
    """``(end, groups)``: where the run of token groups separated by single spaces or tabs
    that starts at *start* ends, and how many separators it holds (linear in the run)."""
    end, groups = start, 0
    while (word := _GROUP.match(text, end)) is not None:
        end = word.end()
        if groups >= _MAX_GROUPS or end >= len(text) - 1 or text[end] not in " \t":
            break
        if _GROUP.match(text, end + 1) is None:
            break
        end += 1
        groups += 1
    return end, groups


def despaced(text: str) -> View | None:
    """*text* with the spaces and tabs removed inside runs that start at a token prefix
    (``ghp_``, ``AKIA``, ``sk-``…) — a token typed or pasted in groups; None when no prefix
    is followed by such a run. Only the fixed-prefix rules run on this view: joining words
    anywhere else would make tokens out of prose. Linear: a prefix inside a run already
    read is skipped."""
    cuts: list[tuple[int, int]] = []
    last = -1
    for prefix in _SHAPED_PREFIX.finditer(text):
        if prefix.start() < last:
            continue
        end, groups = _spaced_end(text, prefix.start())
        last = max(end, prefix.end())
        if groups and end - prefix.start() <= _MAX_SPACED:
            cuts.append((prefix.start(), end))
    if not cuts:
        return None
    out = _Builder()
    last = 0
    for start, end in cuts:
        out.copy(text, last, start)
        for i in range(start, end):
            if text[i] not in " \t":
                out.put(text[i], i, i + 1)
        last = end
    out.copy(text, last, len(text))
    return out.view()
