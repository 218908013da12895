"""The memory intake: every catalog write passes it; unsafe or malformed values are refused."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Final, Protocol

from ctxledger.adapters.security.secret_scan import SecretScanner
from ctxledger.domain.errors import MemoryIntakeError
from ctxledger.domain.memory import (
    MEMORY_STATES,
    CommandEvidence,
    FileEvidence,
    MemoryEntry,
    is_memory_id,
    is_partition_id,
)

__all__ = ["IntakeLimits", "MemoryIntake", "MemoryIntakePort", "is_safe_relative_path"]

_SHA256 = re.compile(r"[0-9a-f]{64}")
_COMMIT = re.compile(r"[0-9a-f]{7,64}")
_SOURCE = re.compile(r"[a-z][a-z0-9_]{0,63}")
# Embedding, override and isolate controls reorder text on screen ("trojan source").
_BIDI_CONTROLS: Final = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_BODY_ALLOWED_CONTROLS: Final = frozenset("\n\t")
_INT32 = 2**31


class MemoryIntakePort(Protocol):
    """What the catalog needs from an intake: admit an entry (possibly normalised) or raise
    MemoryIntakeError naming the rule."""

    def admit(self, entry: MemoryEntry) -> MemoryEntry: ...


@dataclass(frozen=True, slots=True)
class IntakeLimits:
    """Length and count limits of one entry (characters, not bytes)."""

    body_chars: int = 4000
    source_chars: int = 64
    agent_chars: int = 128
    task_chars: int = 256
    cmd_chars: int = 1000
    path_chars: int = 512
    commands: int = 16
    files: int = 32


class MemoryIntake:
    """The standard intake: secrets, limits, ids and paths.

    Secrets: a field is refused when the scanner finds any credential in it
    (``SecretScanner.first_finding``), which holds every credential the ledger's redaction
    replaces — the same scanner and rules, so nothing the ledger would redact reaches the
    catalog.

    Errors name the rule and the field (``MemoryIntakeError.rule``/``.field``), never a value.
    Every text field is scanned for secrets first (refused unscanned above the scanner's cap),
    then checked for control characters and length."""

    def __init__(
        self, limits: IntakeLimits | None = None, scanner: SecretScanner | None = None
    ) -> None:
        self.limits = limits or IntakeLimits()
        self._scanner = scanner or SecretScanner()

    @property
    def scanner(self) -> SecretScanner:
        """The scanner every text field is screened with (the engine's, when wired by
        ``adapters.bootstrap.open_engine``)."""
        return self._scanner

    def admit(self, entry: MemoryEntry) -> MemoryEntry:
        """Return *entry* unchanged when every rule holds; raise MemoryIntakeError otherwise."""
        lim = self.limits
        if not is_memory_id(entry.id):
            raise MemoryIntakeError("invalid_id", "id")
        if not is_partition_id(entry.partition):
            raise MemoryIntakeError("invalid_partition", "partition")
        if entry.state not in MEMORY_STATES:
            raise MemoryIntakeError("invalid_state", "state")
        if isinstance(entry.revision, bool) or entry.revision < 1:
            raise MemoryIntakeError("invalid_revision", "revision")
        if entry.verified and entry.state != "verified":
            raise MemoryIntakeError("invalid_state", "verified")
        if entry.observed_at.utcoffset() is None:
            raise MemoryIntakeError("naive_time", "observed_at")
        self._text(entry.body, "body", lim.body_chars, allowed=_BODY_ALLOWED_CONTROLS)
        if entry.state == "deleted":
            if entry.body:
                raise MemoryIntakeError("not_erased", "body")
        elif not entry.body.strip():
            raise MemoryIntakeError("empty", "body")
        self._text(entry.source, "source", lim.source_chars)
        if _SOURCE.fullmatch(entry.source) is None:
            raise MemoryIntakeError("invalid_source", "source")
        self._text(entry.agent, "agent", lim.agent_chars)
        self._text(entry.task, "task", lim.task_chars)
        evidence = entry.evidence
        if len(evidence.commands) > lim.commands:
            raise MemoryIntakeError("over_limit", "evidence.commands")
        if len(evidence.files) > lim.files:
            raise MemoryIntakeError("over_limit", "evidence.files")
        for n, command in enumerate(evidence.commands):
            self._command(command, f"evidence.commands[{n}]")
        for n, file in enumerate(evidence.files):
            self._file(file, f"evidence.files[{n}]")
        if evidence.commit and _COMMIT.fullmatch(evidence.commit) is None:
            raise MemoryIntakeError("invalid_commit", "evidence.commit")
        return entry

    def _command(self, command: CommandEvidence, field: str) -> None:
        self._text(command.cmd, f"{field}.cmd", self.limits.cmd_chars)
        if not command.cmd.strip():
            raise MemoryIntakeError("empty", f"{field}.cmd")
        code = command.exit_code
        if isinstance(code, bool) or not -_INT32 <= code < _INT32:
            raise MemoryIntakeError("invalid_exit_code", f"{field}.exit_code")
        if command.ran_at.utcoffset() is None:
            raise MemoryIntakeError("naive_time", f"{field}.ran_at")

    def _file(self, file: FileEvidence, field: str) -> None:
        path = file.path
        self._text(path, f"{field}.path", self.limits.path_chars)
        if not is_safe_relative_path(path):
            raise MemoryIntakeError("invalid_path", f"{field}.path")
        if _SHA256.fullmatch(file.sha256) is None:
            raise MemoryIntakeError("invalid_hash", f"{field}.sha256")

    def _text(
        self, value: str, field: str, limit: int, *, allowed: frozenset[str] = frozenset()
    ) -> None:
        if len(value) > self._scanner.max_chars:
            raise MemoryIntakeError("over_limit", field, "too large to scan")
        kind = self._scanner.first_finding(value)
        if kind is not None:
            raise MemoryIntakeError("secret", field, kind)
        if len(value) > limit:
            raise MemoryIntakeError("over_limit", field, f"more than {limit} characters")
        for ch in value:
            if ch in _BIDI_CONTROLS:
                raise MemoryIntakeError("bidi_control", field)
            category = unicodedata.category(ch)
            if category == "Cs":
                raise MemoryIntakeError("invalid_unicode", field)
            if ch not in allowed and category == "Cc":
                raise MemoryIntakeError("control_chars", field)


def is_safe_relative_path(path: str) -> bool:
    """A non-empty, workspace-relative POSIX path: not absolute, no ``..``, no ``~`` prefix, no
    backslash, no control, format or line-separator characters."""
    if not path or path.startswith(("/", "~")) or "\\" in path:
        return False
    if len(path) >= 2 and path[1] == ":":  # a drive letter
        return False
    if any(unicodedata.category(ch) in {"Cc", "Cf", "Zl", "Zp"} for ch in path):
        return False
    return ".." not in path.split("/")
