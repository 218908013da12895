"""The identifiers a coding agent works with, read from text: file paths, dotted names,
code-like words and called names.

Used twice: the working-set item a rebuild or refresh carries (so that what is dropped leaves
its names behind, ``domain.working_set``) and the next-action recall measured by
``ctxledger simulate`` (does the prompt name what the agent's next command names?). Pure and
deterministic; at most :data:`SCAN_CHARS` characters of a text are read.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Iterable

__all__ = [
    "GENERIC_NAMES",
    "SCAN_CHARS",
    "identifiers",
    "paths",
]

SCAN_CHARS = 60_000
"""Characters of one text scanned (the head and the tail of a longer one)."""

_EXTENSIONS = (
    "py|pyi|pyx|ipynb|js|jsx|mjs|cjs|ts|tsx|vue|svelte|json|ya?ml|toml|cfg|ini|conf|md|rst|txt"
    "|html?|css|scss|less|c|h|cc|cpp|cxx|hpp|go|rs|java|kt|kts|scala|rb|php|swift|cs"
    "|sh|bash|zsh|sql|xml|gradle|lock|mk|cmake|proto|graphql|lua|pl|jl|dart|ex|exs|erl|hs"
    "|patch|diff|env|csv|tsv|log"
)
_PATH = re.compile(
    rf"(?<![\w/.@:-])(?:\.{{1,2}}/|/)?((?:[\w.+-]+/)*[\w+-][\w.+-]*\.(?:{_EXTENSIONS}))(?![\w/-])",
    re.IGNORECASE,
)
_DIFF_SIDE = re.compile(r"^[ab]/(?=[^/]+/)")
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
_DOTTED = re.compile(r"(?<![\w.])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?![\w(]*\.\w)")
_CALLED = re.compile(r"(?<![\w.])([A-Za-z_]\w{2,})\(")
_WORD = re.compile(r"(?<![\w.])([A-Za-z_][A-Za-z0-9_]{3,})(?![\w.])")
_INNER_CAPITAL = re.compile(r"[a-z0-9][A-Z]")
_FILE_TAIL = re.compile(rf"\.(?:{_EXTENSIONS})$", re.IGNORECASE)

GENERIC_NAMES: frozenset[str] = frozenset(
    {
        *(n for n in dir(builtins) if not n.startswith("_")),
        *("self", "cls", "args", "kwargs", "main", "test", "tests", "init", "__init__"),
        *("get", "set", "add", "append", "extend", "insert", "remove", "pop", "clear"),
        *("keys", "values", "items", "update", "copy", "join", "split", "strip", "lstrip"),
        *("rstrip", "replace", "format", "startswith", "endswith", "lower", "upper", "find"),
        *("read", "write", "open", "close", "run", "call", "exec", "echo", "grep", "print"),
        *("assert", "return", "import", "from", "class", "def", "lambda", "yield", "with"),
        *("sed", "cat", "head", "tail", "find", "python", "python3", "pytest", "bash"),
        *("git", "diff", "status", "submit", "exit", "null", "true", "false", "none"),
        *("os.path", "sys.path", "os.path.join", "self.assertEqual", "self.assertTrue"),
    }
)
"""Names too common to say anything about a task: Python's builtins, generic method names,
shell tools and keywords."""


def _scan(text: str) -> str:
    if len(text) <= SCAN_CHARS:
        return text
    half = SCAN_CHARS // 2
    return text[:half] + "\n" + text[-half:]


def paths(text: str) -> list[str]:
    """File paths with a source/config extension in *text*, in order of first appearance,
    without a leading ``./``, ``/`` or a ``a/``/``b/`` diff prefix; URLs are ignored."""
    seen: dict[str, None] = {}
    for m in _PATH.finditer(_URL.sub(" ", _scan(text))):
        path = _DIFF_SIDE.sub("", m.group(1))
        if "/" not in path and "." in path.rsplit(".", 1)[0]:
            continue  # a bare dotted module name (django.conf.py is not a path anyone types)
        if 3 <= len(path) <= 240:
            seen.setdefault(path, None)
    return list(seen)


def _code_like(word: str) -> bool:
    inner = word.strip("_")
    return "_" in inner or bool(_INNER_CAPITAL.search(word))


def identifiers(text: str) -> list[str]:
    """The working identifiers of *text*, in order of first appearance: file paths (see
    :func:`paths`), dotted names (``a.b.c``, not ending in a file extension), code-like
    words of at least 4 characters with an inner ``_`` or an inner capital
    (``ddl_references``, ``IndexName``) and names followed by ``(``; :data:`GENERIC_NAMES`
    and names shorter than 4 characters are left out."""
    scanned = _scan(text)
    found: dict[str, None] = dict.fromkeys(paths(scanned))
    stripped = _URL.sub(" ", scanned)

    def add(names: Iterable[str]) -> None:
        for name in names:
            if len(name) >= 4 and name not in GENERIC_NAMES and not _FILE_TAIL.search(name):
                found.setdefault(name, None)

    add(m.group(1) for m in _DOTTED.finditer(stripped))
    add(m.group(1) for m in _CALLED.finditer(stripped))
    add(w for w in (m.group(1) for m in _WORD.finditer(stripped)) if _code_like(w))
    return list(found)
