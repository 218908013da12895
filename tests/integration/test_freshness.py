"""Freshness against real git worktrees: per-view staleness, old evidence stale everywhere."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ctxledger.adapters.memory.catalog import MemoryCatalog
from ctxledger.adapters.memory.freshness import GitWorktreeProbe
from ctxledger.domain.memory import CommandEvidence, Evidence, FileEvidence, MemoryEntry
from ctxledger.domain.recall import RecallSettings, recall

NOW = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)
ON = RecallSettings(enabled=True)
APP = "def main() -> int:\n    return 0\n"


class WordCounter:
    name = "test-words"

    def count(self, text: str) -> int:
        return len(re.findall(r"\w+|[^\w\s]", text))


def git(cwd: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def views(tmp_path: Path) -> tuple[Path, Path, str]:
    """Two worktrees of one repository at the same commit: (view A, view B, commit)."""
    a = tmp_path / "repo"
    (a / "src").mkdir(parents=True)
    git(a, "init", "-q", "-b", "main")
    (a / "src" / "app.py").write_text(APP)
    (a / "README.md").write_text("demo\n")
    git(a, "add", "-A")
    git(a, "commit", "-q", "-m", "initial")
    commit = git(a, "rev-parse", "HEAD")
    b = tmp_path / "view-b"
    git(a, "worktree", "add", "-q", "-b", "b", str(b))
    return a, b, commit


def cited(catalog: MemoryCatalog, workspace: Path, commit: str, ran_at: datetime) -> MemoryEntry:
    entry = catalog.add_candidate(
        partition=catalog.partition_for(workspace),
        body="src/app.py main() returns 0; `make test` passes.",
        source="worker_finding",
        agent="worker-1",
        task="T-9",
        observed_at=ran_at,
        evidence=Evidence(
            commands=(CommandEvidence(cmd="make test", exit_code=0, ran_at=ran_at),),
            files=(FileEvidence(path="src/app.py", sha256=sha256(APP)),),
            commit=commit,
        ),
    )
    return catalog.verify(entry.id, entry.revision)


def recall_for(entries: list[MemoryEntry], probe: GitWorktreeProbe) -> tuple[str, ...]:
    group = recall(entries, role="worker", settings=ON, probe=probe, counter=WordCounter(), now=NOW)
    return group.memory_ids


def test_editing_a_cited_file_drops_the_entry_for_that_view_only(
    views: tuple[Path, Path, str], tmp_path: Path
) -> None:
    a, b, commit = views
    probe_a, probe_b = GitWorktreeProbe(a), GitWorktreeProbe(b)
    with MemoryCatalog.open(tmp_path / "catalog.db") as catalog:
        entry = cited(catalog, a, commit, NOW - timedelta(days=1))
        entries = catalog.recall_candidates(entry.partition)
        assert recall_for(entries, probe_a) == (entry.id,)
        assert recall_for(entries, probe_b) == (entry.id,)

        (a / "src" / "app.py").write_text(APP + "# edited\n")
        group_a = recall(
            entries, role="worker", settings=ON, probe=probe_a, counter=WordCounter(), now=NOW
        )
        assert group_a.memory_ids == ()
        assert group_a.skipped == {entry.id: "stale_view"}
        assert group_a.stale_everywhere == ()
        assert recall_for(entries, probe_b) == (entry.id,)
        # A view-specific mismatch does not change the catalog.
        assert catalog.get(entry.id).state == "verified"


def test_command_evidence_older_than_30_days_is_stale_in_every_view(
    views: tuple[Path, Path, str], tmp_path: Path
) -> None:
    a, b, commit = views
    with MemoryCatalog.open(tmp_path / "catalog.db") as catalog:
        entry = cited(catalog, a, commit, NOW - timedelta(days=31))
        entries = catalog.recall_candidates(entry.partition)
        for probe in (GitWorktreeProbe(a), GitWorktreeProbe(b)):
            group = recall(
                entries, role="primary", settings=ON, probe=probe, counter=WordCounter(), now=NOW
            )
            assert group.memory_ids == ()
            assert group.skipped == {entry.id: "stale_everywhere"}
            assert group.stale_everywhere == (entry.id,)
        # The caller records it: the entry leaves recall for everyone.
        stale = catalog.mark_stale(entry.id, entry.revision)
        assert stale.state == "stale"
        assert catalog.recall_candidates(entry.partition) == []


def test_commit_ancestry_is_per_view(views: tuple[Path, Path, str], tmp_path: Path) -> None:
    a, b, _ = views
    (b / "NOTES.md").write_text("only on branch b\n")
    git(b, "add", "NOTES.md")
    git(b, "commit", "-q", "-m", "b only")
    b_commit = git(b, "rev-parse", "HEAD")
    probe_a, probe_b = GitWorktreeProbe(a), GitWorktreeProbe(b)
    assert probe_a.is_ancestor(b_commit) is False
    assert probe_b.is_ancestor(b_commit) is True
    assert probe_a.is_ancestor("0" * 40) is None
    assert probe_a.is_ancestor("not-hex") is None
    with MemoryCatalog.open(tmp_path / "catalog.db") as catalog:
        entry = cited(catalog, a, b_commit, NOW - timedelta(days=2))
        entries = [entry]
        assert recall_for(entries, probe_a) == ()
        assert recall_for(entries, probe_b) == (entry.id,)
        unknown = recall(
            entries,
            role="worker",
            settings=ON,
            probe=GitWorktreeProbe(tmp_path / "not-a-repo"),
            counter=WordCounter(),
            now=NOW,
        )
        assert unknown.skipped == {entry.id: "unknown"}


def test_probe_answers_none_for_what_it_cannot_know(
    views: tuple[Path, Path, str], tmp_path: Path
) -> None:
    a, _, _ = views
    outside = tmp_path / "secret.txt"
    outside.write_text("outside the worktree\n")
    (a / "escape").symlink_to(outside)
    probe = GitWorktreeProbe(a)
    assert probe.file_hash("src/app.py") == sha256(APP)
    assert probe.file_hash("missing.py") is None
    assert probe.file_hash("src") is None
    assert probe.file_hash("../secret.txt") is None
    assert probe.file_hash(str(outside)) is None
    assert probe.file_hash("escape") is None
    assert probe.file_hash("src/\x00app.py") is None
