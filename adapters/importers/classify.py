"""Regex heuristics shared by the importers: commands, failures, test runs, file views, paths.

Every function is pure and bounded: texts are scanned up to a fixed size, results are capped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

__all__ = [
    "MAX_FILES",
    "MAX_SYMBOLS",
    "StepFlags",
    "classify_step",
    "extract_files",
    "extract_symbols",
    "normalize_command",
]

MAX_FILES = 8
MAX_SYMBOLS = 12
_SCAN = 60_000  # characters of one text scanned for paths, symbols and markers

_EXTENSIONS = (
    "py|pyi|pyx|ipynb|js|jsx|mjs|cjs|ts|tsx|vue|svelte|json|ya?ml|toml|cfg|ini|conf|md|rst|txt"
    "|html?|css|scss|less|c|h|cc|cpp|cxx|hpp|go|rs|java|kt|kts|scala|rb|php|swift|m|cs|fs"
    "|sh|bash|zsh|sql|xml|gradle|lock|mk|cmake|proto|graphql|lua|pl|r|jl|dart|ex|exs|erl|hs|ml"
    "|patch|diff|env|csv|tsv|log|traj"
)
_PATH = re.compile(
    rf"(?<![\w/.@:-])((?:~|\.{{1,2}})?/?(?:[\w.+-]+/)*[\w+-][\w.+-]*\.(?:{_EXTENSIONS}))(?![\w/-])",
    re.IGNORECASE,
)
_FILE_LIKE = re.compile(rf"\.(?:{_EXTENSIONS})$", re.IGNORECASE)
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)

_TRACE_IN = re.compile(r'File "[^"\n]+", line \d+, in ([A-Za-z_]\w*)')
_DEF = re.compile(
    r"^[\s\d:>+-]*(?:async\s+)?(?:def|class|func|fn|function)\s+([A-Za-z_]\w*)", re.MULTILINE
)
_TICKED = re.compile(r"`([A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*)(?:\(\))?`")
_DOTTED_CALL = re.compile(r"\b([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)\(")
_NOT_SYMBOLS = frozenset(
    {
        *("self", "cls", "None", "True", "False", "print", "len", "str", "int", "list"),
        *("dict", "set", "tuple", "object", "type", "return", "import", "from", "module"),
        *("main", "test", "tests"),
    }
)

_CD_PREFIX = re.compile(r"^(?:cd\s+(?:\"[^\"]*\"|'[^']*'|\S+)\s*(?:&&|;)\s*)+")
_SPACES = re.compile(r"\s+")

_TEST_COMMAND = re.compile(
    r"(?:^|[\s;&|(/])(?:pytest|py\.test|tox|nox|runtests\.py|manage\.py\s+test|unittest"
    r"|(?:npm|pnpm|yarn)\s+(?:run\s+)?test|go\s+test|cargo\s+test|mvn\b.*\btest|gradlew?\b.*\btest"
    r"|make\s+(?:test|check)|jest|mocha|vitest|phpunit|rspec|ctest)\b",
    re.IGNORECASE,
)
_TEST_OUTPUT = re.compile(
    r"^=+ .*\b(?:passed|failed|errors?)\b.* =+$|^Ran \d+ tests? in |^(?:FAILED|PASSED) \S+::|"
    r"^test result: (?:ok|FAILED)|^Tests?:\s+\d+ (?:passed|failed)",
    re.MULTILINE,
)
_TEST_FAILED = re.compile(
    r"^FAILED\b|^FAIL:|^ERROR: test|\b\d+ (?:failed|errors?)\b|^FAILED \(|"
    r"^test result: FAILED|^Tests?:\s+\d+ failed|^--- FAIL:",
    re.MULTILINE,
)
_TRACEBACK = re.compile(r"Traceback \(most recent call last\):")
_ERROR_LINE = re.compile(
    r"^(?:[A-Za-z_][\w.]*(?:Error|Exception)|E\s{2,}\w+(?:Error|Exception))(?::|$)", re.MULTILINE
)
_TOOL_ERROR = re.compile(
    r"introduced new syntax error|command not found|No such file or directory|"
    r"^(?:ERROR|Error|error|fatal):\s|Permission denied|Segmentation fault|"
    r"^Tool call error|timed out|has no new output after",
    re.MULTILINE,
)
_TRUNCATED = re.compile(
    r"<elided_chars>|characters elided|output (?:was |is )?too long|observation truncated|"
    r"<response clipped>|\[\.\.\.[^\]\n]{0,80}truncated|output truncated|\(truncated\)",
    re.IGNORECASE,
)
_VIEW_OBSERVATION = re.compile(r"^\[File: [^\]\n]+\]|^Here's the result of running `cat -n` on ")
_VIEWERS = frozenset(
    {
        *("cat", "head", "tail", "less", "more", "nl", "bat", "open", "goto"),
        *("scroll_up", "scroll_down", "view", "view_file"),
    }
)
_VIEW_PIPES = frozenset({"head", "tail", "nl", "cat", "sed"})
_SED_PRINT = re.compile(r"^sed\s+(?:-\w*n\w*\s+)")
_WRITES = re.compile(r"(?<![0-9&])>|<<")
_DIFF_SIDE = re.compile(r"^[ab]/(?=[^/]+/)")
_AMBIGUOUS_BARE = frozenset({"conf", "sql", "env", "log", "m", "r", "ml", "fs", "cs", "lock"})


def _scan(text: str) -> str:
    return text if len(text) <= _SCAN else text[: _SCAN // 2] + "\n" + text[-_SCAN // 2 :]


def _unique(values: Iterable[str], cap: int) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for v in values:
        if v and v not in seen:
            seen[v] = None
            if len(seen) >= cap:
                break
    return tuple(seen)


def _strip_root(path: str, roots: Sequence[str]) -> str:
    for root in roots:
        r = root.rstrip("/") + "/"
        if len(r) > 1 and path.startswith(r):
            return path[len(r) :]
    return path[2:] if path.startswith("./") else path


def extract_files(*texts: str, roots: Sequence[str] = (), cap: int = MAX_FILES) -> tuple[str, ...]:
    """File paths mentioned in *texts* (known source/config extensions), in order of first
    appearance, without a leading ``./`` or a working-directory root in *roots*; URLs are
    ignored. At most *cap* paths."""

    def found() -> Iterable[str]:
        for text in texts:
            for m in _PATH.finditer(_URL.sub(" ", _scan(text))):
                path = _DIFF_SIDE.sub("", _strip_root(m.group(1), roots))
                if not path or path.startswith("..") or len(path) > 240:
                    continue
                if "/" not in path:  # a bare name: refuse dotted module names (django.conf)
                    stem, ext = path.rsplit(".", 1)
                    if "." in stem or ext.lower() in _AMBIGUOUS_BARE:
                        continue
                yield path

    return _unique(found(), cap)


def extract_symbols(*texts: str, cap: int = MAX_SYMBOLS) -> tuple[str, ...]:
    """Code symbols mentioned in *texts*: traceback frames (``in name``), definitions
    (``def``/``class``/``func``…), back-ticked identifiers and dotted calls (``a.b(``); in
    order of first appearance, at most *cap*."""

    def found() -> Iterable[str]:
        for text in texts:
            scanned = _scan(text)
            for rx in (_TRACE_IN, _DEF, _TICKED, _DOTTED_CALL):
                for m in rx.finditer(scanned):
                    sym = m.group(1)
                    if len(sym) >= 3 and sym not in _NOT_SYMBOLS and not _FILE_LIKE.search(sym):
                        yield sym

    return _unique(found(), cap)


def normalize_command(command: str) -> str:
    """The tool signature of a command: its first line, leading ``cd DIR &&`` removed,
    whitespace collapsed, at most 200 characters (so retries of one edit compare equal)."""
    first = command.strip().split("\n", 1)[0]
    first = _CD_PREFIX.sub("", first.strip())
    return _SPACES.sub(" ", first).strip()[:200]


def _is_view_command(command: str) -> bool:
    parts = [p.strip() for p in normalize_command(command).split("|")]
    if not parts or not parts[0]:
        return False
    if _WRITES.search(parts[0]):
        return False  # `cat > f << EOF` writes a file
    words = parts[0].split(" ", 2)
    head = words[0]
    if head == "str_replace_editor":  # SWE-agent 1.x / OpenHands editor tool
        return len(words) > 1 and words[1] == "view" and len(parts) == 1
    first_is_view = head in _VIEWERS or bool(_SED_PRINT.match(parts[0]))
    return first_is_view and all(p.split(" ", 1)[0] in _VIEW_PIPES for p in parts[1:])


class StepFlags:
    """What the heuristics concluded about one step's observation."""

    __slots__ = ("failure", "file_view", "test_failure", "test_run", "truncated")

    def __init__(
        self,
        *,
        failure: bool,
        test_failure: bool,
        test_run: bool,
        file_view: bool,
        truncated: bool,
    ) -> None:
        self.failure = failure
        self.test_failure = test_failure
        self.test_run = test_run
        self.file_view = file_view
        self.truncated = truncated


def classify_step(
    command: str, observation: str, *, exit_code: int | None = None, view: bool | None = None
) -> StepFlags:
    """Flags of one step.

    - ``file_view``: *view* when given (a structured viewer tool), else a viewer command
      (``cat``, ``head``, ``sed -n``, SWE-agent ``open``/``goto``/``scroll_*``, ``str_replace_editor
      view``…, piped only into other viewers) or an observation that starts with SWE-agent's
      ``[File: …]`` or ``Here's the result of running `cat -n` on``;
    - ``test_run``: a test command (pytest, tox, ``manage.py test``, ``npm test``, ``go
      test``…) or test-runner summary lines in the output; ``test_failure``: a test run whose
      output reports failures, or that exited non-zero;
    - ``failure``: ``test_failure``, a non-zero ``exit_code``, or — outside file views — a
      Python traceback, an ``…Error:`` line, or a tool/shell error message;
    - ``truncated``: the recording says the output was cut (elided characters, clipped
      responses, truncation notices).
    """
    text = _scan(observation)
    file_view = view if view is not None else (
        _is_view_command(command) or bool(_VIEW_OBSERVATION.match(observation))
    )  # fmt: skip
    test_run = not file_view and (
        bool(_TEST_COMMAND.search(normalize_command(command))) or bool(_TEST_OUTPUT.search(text))
    )
    nonzero = exit_code is not None and exit_code != 0
    test_failure = test_run and (nonzero or bool(_TEST_FAILED.search(text)))
    error_text = not file_view and (
        bool(_TRACEBACK.search(text))
        or bool(_ERROR_LINE.search(text))
        or bool(_TOOL_ERROR.search(text))
    )
    return StepFlags(
        failure=test_failure or nonzero or error_text,
        test_failure=test_failure,
        test_run=test_run,
        file_view=file_view,
        truncated=bool(_TRUNCATED.search(text)),
    )
