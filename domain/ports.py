"""Ports the pure core needs from the world, as typing.Protocols; adapters implement them."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

__all__ = ["Clock", "FreshnessProbe", "TokenCounter"]


class TokenCounter(Protocol):
    """Counts tokens of text for one encoding; ``name`` is recorded on every pack."""

    @property
    def name(self) -> str: ...

    def count(self, text: str) -> int: ...


class Clock(Protocol):
    """Source of timezone-aware "now" (only adapters read the real clock)."""

    def now(self) -> datetime: ...


class FreshnessProbe(Protocol):
    """Checks project-memory evidence against a recipient's worktree view."""

    def file_hash(self, path: str) -> str | None: ...

    def is_ancestor(self, commit: str) -> bool | None: ...

    def head_commit(self) -> str | None:
        """The view's HEAD commit (None: not a repository, or unknown)."""
        ...
