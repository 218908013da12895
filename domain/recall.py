"""Recall of project memory into a prompt: settings and role gate, freshness, quoting, caps."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Final, Literal

import msgspec

from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.memory import MemoryEntry
from ctxledger.domain.model import Durability, Item, Layer, Source, item_id_for
from ctxledger.domain.ports import FreshnessProbe, TokenCounter
from ctxledger.domain.request import BuildRequest, Scope
from ctxledger.domain.retrieval import item_terms, request_terms

__all__ = [
    "COMMAND_MAX_AGE",
    "QUOTE_PREFIX",
    "RECALL_HEADER",
    "RECALL_LIMIT",
    "RECALL_MAX_BYTES",
    "RECALL_MAX_TOKENS",
    "RECALL_ROLES",
    "SCOPED_RECALL_ROLES",
    "rank_for_recall",
    "Freshness",
    "FreshnessVerdict",
    "RecallGroup",
    "RecallSettings",
    "check_freshness",
    "escape_invisible",
    "quote_body",
    "recall",
    "recall_allowed",
    "render_entry",
]

RECALL_HEADER: Final = "Untrusted historical project observation; verify before use."
RECALL_LIMIT: Final = 4
RECALL_MAX_TOKENS: Final = 300
RECALL_MAX_BYTES: Final = 1200
COMMAND_MAX_AGE: Final = timedelta(days=30)
RECALL_ROLES: Final = frozenset({"primary", "worker", "debug", "integration"})
"""Roles that receive recalled memory; probes, reviewers and unknown roles never do."""
QUOTE_PREFIX: Final = "> "
_SEPARATOR: Final = "\n\n"

# Characters escaped as \uXXXX wherever recalled text is rendered: controls (except the line
# breaks the quoting itself handles), format characters (zero-width, bidi marks, embeddings,
# overrides, isolates, BOM), line/paragraph separators, surrogates, private use, unassigned.
_ESCAPED_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


class RecallSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The project-memory recall switch (off by default)."""

    enabled: bool = False


Freshness = Literal["current", "stale_view", "stale_everywhere", "unknown", "not_verified"]


class FreshnessVerdict(msgspec.Struct, frozen=True, kw_only=True):
    """Whether an entry may be shown to one recipient; ``reason`` is short and value-free."""

    status: Freshness
    reason: str = ""


class RecallGroup(msgspec.Struct, frozen=True, kw_only=True):
    """The recalled-memory group of one prompt (replaces the previous group).

    ``text`` is the whole capped block (≤ RECALL_MAX_TOKENS by the counter and ≤
    RECALL_MAX_BYTES UTF-8 bytes); ``items`` holds the same per-entry blocks as
    ``recalled_memory`` items; ``skipped`` maps memory id → reason; ``stale_everywhere`` lists
    entries whose command evidence is too old (the caller marks them stale in the catalog)."""

    text: str = ""
    items: tuple[Item, ...] = ()
    memory_ids: tuple[str, ...] = ()
    skipped: dict[str, str] = {}
    stale_everywhere: tuple[str, ...] = ()
    tokens: int = 0
    bytes: int = 0


SCOPED_RECALL_ROLES: Final = frozenset({"architect", "test"})
"""Roles that follow their scope (seed 000): they receive project memory as the recall roles
do, and like every role not when their scope excludes it (``Scope.exclude_project_memory``)."""


def recall_allowed(role: str, settings: RecallSettings, scope: Scope | None = None) -> bool:
    """True when recall is on, *role* is one that receives project memory (the recall roles,
    and architect and test by their scope) and *scope* does not exclude project memory."""
    if not settings.enabled or (scope is not None and scope.exclude_project_memory):
        return False
    return role.strip().lower() in RECALL_ROLES | SCOPED_RECALL_ROLES


def rank_for_recall(
    entries: Iterable[MemoryEntry], request: BuildRequest | None
) -> list[MemoryEntry]:
    """*entries* most relevant to the *request* first. Relevance: 3 per evidence path the
    request names, 1 per evidence basename it names, 1 per word shared with its task,
    keywords, failures and symbols. Ties (and every entry when there is no request): newest
    observation first, then by id."""
    listed = list(entries)
    if request is None:
        return sorted(listed, key=lambda e: (-e.observed_at.timestamp(), e.id))
    terms = request_terms(request)
    words = terms.words | terms.failure_words | terms.symbol_words

    def score(entry: MemoryEntry) -> int:
        paths = {f.path.replace("\\", "/").lstrip("./") for f in entry.evidence.files}
        names = {p.rsplit("/", 1)[-1] for p in paths}
        hits = 3 * len(paths & terms.files) + len(names & terms.file_names)
        return hits + len(words & item_terms(entry.body).words)

    return sorted(listed, key=lambda e: (-score(e), -e.observed_at.timestamp(), e.id))


def check_freshness(entry: MemoryEntry, probe: FreshnessProbe, now: datetime) -> FreshnessVerdict:
    """Check an entry against the recipient's worktree view (through *probe*).

    Command evidence older than COMMAND_MAX_AGE → ``stale_everywhere``; a commit that is not an
    ancestor of the view's HEAD or a file whose hash differs → ``stale_view``; anything the
    probe cannot answer (None) → ``unknown``. An entry without evidence is ``current``."""
    _require_aware(now)
    if entry.state != "verified" or not entry.verified:
        return FreshnessVerdict(status="not_verified")
    evidence = entry.evidence
    for command in evidence.commands:
        if now - command.ran_at > COMMAND_MAX_AGE:
            return FreshnessVerdict(status="stale_everywhere", reason="command evidence too old")
    if evidence.commit:
        ancestor = probe.is_ancestor(evidence.commit)
        if ancestor is None:
            return FreshnessVerdict(status="unknown", reason="commit unknown to this view")
        if not ancestor:
            return FreshnessVerdict(status="stale_view", reason="commit not in this view")
    for file in evidence.files:
        digest = probe.file_hash(file.path)
        if digest is None:
            return FreshnessVerdict(status="unknown", reason="file unreadable in this view")
        if digest != file.sha256:
            return FreshnessVerdict(status="stale_view", reason="file changed in this view")
    return FreshnessVerdict(status="current")


def escape_invisible(text: str, *, keep_newlines: bool = False) -> str:
    """Make every character visible: backslash doubled, ``<|`` broken, and control, format
    (zero-width, bidi), separator, surrogate, private-use and unassigned characters written as
    ``\\uXXXX``; ``\\n`` is kept only when *keep_newlines*."""
    out: list[str] = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif ch == "\n" and keep_newlines:
            out.append(ch)
        elif unicodedata.category(ch) in _ESCAPED_CATEGORIES:
            code = ord(ch)
            out.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
        else:
            out.append(ch)
    return "".join(out).replace("<|", "<\\|")


def quote_body(body: str) -> str:
    """The body as a quote: every line escaped and prefixed with QUOTE_PREFIX, so no body
    line can end the quote, start a role turn or hide characters."""
    lines = escape_invisible(body.strip("\n"), keep_newlines=True).split("\n")
    return "\n".join(QUOTE_PREFIX + line for line in lines)


def render_entry(entry: MemoryEntry) -> str:
    """One recalled entry: the untrusted header, id, observation date, evidence paths, quote."""
    observed = entry.observed_at.astimezone(UTC).date().isoformat()
    paths = ", ".join(escape_invisible(f.path) for f in entry.evidence.files) or "none"
    meta = f"id: {escape_invisible(entry.id)} · observed: {observed} · evidence: {paths}"
    return f"{RECALL_HEADER}\n{meta}\n{quote_body(entry.body)}"


def recall(
    entries: Iterable[MemoryEntry],
    *,
    role: str,
    settings: RecallSettings,
    probe: FreshnessProbe,
    counter: TokenCounter,
    now: datetime,
    limit: int = RECALL_LIMIT,
    max_tokens: int = RECALL_MAX_TOKENS,
    max_bytes: int = RECALL_MAX_BYTES,
    scope: Scope | None = None,
) -> RecallGroup:
    """The recalled-memory group for one recipient.

    Empty when recall is off, the role does not receive memory or *scope* excludes it. Otherwise each entry (in the
    given order) must be verified and current in the recipient's view; at most *limit* are
    rendered, and an entry whose block would push the group over *max_tokens* or *max_bytes*
    is skipped whole (later, smaller entries are still tried)."""
    _require_aware(now)
    if not recall_allowed(role, settings, scope):
        return RecallGroup()
    items: list[Item] = []
    ids: list[str] = []
    skipped: dict[str, str] = {}
    stale: list[str] = []
    text = ""
    for entry in entries:
        if entry.id in skipped or entry.id in ids:
            continue
        if len(ids) >= limit:
            skipped[entry.id] = "limit"
            continue
        verdict = check_freshness(entry, probe, now)
        if verdict.status != "current":
            skipped[entry.id] = verdict.status
            if verdict.status == "stale_everywhere":
                stale.append(entry.id)
            continue
        block = render_entry(entry)
        candidate = text + _SEPARATOR + block if text else block
        if len(candidate.encode("utf-8")) > max_bytes or counter.count(candidate) > max_tokens:
            skipped[entry.id] = "over_cap"
            continue
        text = candidate
        ids.append(entry.id)
        items.append(_item(entry, block, counter))
    if not ids:
        return RecallGroup(skipped=skipped, stale_everywhere=tuple(stale))
    return RecallGroup(
        text=text,
        items=tuple(items),
        memory_ids=tuple(ids),
        skipped=skipped,
        stale_everywhere=tuple(stale),
        tokens=counter.count(text),
        bytes=len(text.encode("utf-8")),
    )


def _item(entry: MemoryEntry, block: str, counter: TokenCounter) -> Item:
    return Item(
        id=item_id_for(Layer.L3, Source.RECALLED_MEMORY, block),
        layer=Layer.L3,
        source=Source.RECALLED_MEMORY,
        content=block,
        token_count=counter.count(block),
        agent=entry.agent,
        task=entry.task,
        observed_at=entry.observed_at,
        verified=False,
        durability=Durability.DURABLE,
        files=tuple(escape_invisible(f.path) for f in entry.evidence.files),
        source_id=entry.id,
        group="recalled_memory",
    )


def _require_aware(now: datetime) -> None:
    if now.utcoffset() is None:
        raise InvalidInputError("recall needs a timezone-aware 'now'")
