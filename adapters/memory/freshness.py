"""FreshnessProbe over a git worktree: file hashes under its root and commit ancestry."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from pathlib import Path
from typing import Final

from ctxledger.adapters.memory.intake import is_safe_relative_path

__all__ = ["GitWorktreeProbe"]

_COMMIT = re.compile(r"[0-9a-f]{7,64}")
_MAX_HASHED_BYTES: Final = 64 * 1024 * 1024


class GitWorktreeProbe:
    """One recipient's worktree view. Every answer it cannot give with certainty is None.

    ``file_hash`` is the SHA-256 of a regular file under ``root`` (paths must be relative, stay
    under the root after resolving symlinks, and name a file of at most 64 MiB);
    ``is_ancestor`` runs ``git merge-base --is-ancestor <commit> HEAD`` in the root;
    ``head_commit`` is ``git rev-parse HEAD`` (what a promotion records as its commit)."""

    def __init__(
        self, root: str | os.PathLike[str], *, git: str = "git", timeout: float = 10.0
    ) -> None:
        self.root = Path(root).resolve()
        self._git = git
        self._timeout = timeout

    def file_hash(self, path: str) -> str | None:
        if not is_safe_relative_path(path):
            return None
        try:
            target = (self.root / path).resolve(strict=True)
        except (OSError, RuntimeError):
            return None
        if not target.is_relative_to(self.root) or not target.is_file():
            return None
        try:
            if target.stat().st_size > _MAX_HASHED_BYTES:
                return None
            digest = hashlib.sha256()
            with target.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 16), b""):
                    digest.update(block)
        except OSError:
            return None
        return digest.hexdigest()

    def _git_run(self, *args: str) -> subprocess.CompletedProcess[bytes] | None:
        try:
            return subprocess.run(
                [self._git, "-C", str(self.root), *args],
                capture_output=True,
                timeout=self._timeout,
                check=False,
                env={**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"},
            )
        except (OSError, subprocess.TimeoutExpired):
            return None

    def head_commit(self) -> str | None:
        """``git rev-parse HEAD`` in the root (None outside a repository or without commits)."""
        done = self._git_run("rev-parse", "--verify", "HEAD")
        if done is None or done.returncode != 0:
            return None
        head = done.stdout.decode("ascii", "replace").strip()
        return head if _COMMIT.fullmatch(head) else None

    def is_ancestor(self, commit: str) -> bool | None:
        if _COMMIT.fullmatch(commit) is None:
            return None
        done = self._git_run("merge-base", "--is-ancestor", commit, "HEAD")
        if done is None:
            return None
        if done.returncode == 0:
            return True
        if done.returncode == 1:
            return False
        return None
