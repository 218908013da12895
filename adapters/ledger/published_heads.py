"""Published stream heads: ``audit --heads`` prints them (signed on a keyed chain) and
``audit --against FILE`` compares the ledger with heads published earlier.

The hash chain shows any change *inside* a stream, but not a stream cut at its end, nor a
file rewritten whole with its chains rebuilt (on a plain, unkeyed chain anyone can recompute
the links). A copy of the heads kept elsewhere — a CI artefact, a ticket, a second machine —
anchors those: every published stream must still be there, at least as long, with the very
link it had at the published version. On a keyed chain each head carries an HMAC under the
chain key, so a head file cannot be forged to match a rewritten ledger either.
"""

from __future__ import annotations

import hmac
import json
from pathlib import Path
from typing import Any

from ctxledger.domain.chain import ChainCheck, head_signature
from ctxledger.domain.errors import InvalidInputError
from ctxledger.projections.audit import Violation

__all__ = ["compare_heads", "load_published", "signed_heads", "wanted_links"]

Published = dict[str, tuple[int, str, str]]
"""Stream id → (version, link, signature ("" unsigned))."""


def signed_heads(chains: ChainCheck, key: bytes | None) -> dict[str, dict[str, Any]]:
    """Every stream's head as ``audit --heads --json`` prints it: version and link, and on a
    keyed chain (with its key) the signature."""
    out: dict[str, dict[str, Any]] = {}
    for sid, (version, head) in chains.heads.items():
        entry: dict[str, Any] = {"version": version, "link": head}
        if key is not None:
            entry["signature"] = head_signature(key, sid, version, head)
        out[sid] = entry
    return out


def load_published(path: Path) -> Published:
    """The heads in *path*: the JSON ``audit --heads --json`` printed (its ``heads``), or that
    mapping alone. One-line InvalidInputError when it is not such a file."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvalidInputError(f"--against {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise InvalidInputError(f"--against {path}: not JSON ({exc})") from None
    heads = doc.get("heads", doc) if isinstance(doc, dict) else None
    if not isinstance(heads, dict):
        raise InvalidInputError(f"--against {path}: no stream heads (audit --heads --json)")
    found: Published = {}
    for sid, entry in heads.items():
        version = entry.get("version") if isinstance(entry, dict) else None
        head = entry.get("link") if isinstance(entry, dict) else None
        if type(version) is not int or version < 1 or not isinstance(head, str):
            raise InvalidInputError(f"--against {path}: stream {sid[:80]!r}: not a head")
        found[sid] = (version, head, str(entry.get("signature", "")))
    return found


def wanted_links(published: Published) -> dict[tuple[str, int], str]:
    """The (stream, version) pairs whose link the chain check must keep."""
    return {(sid, version): "" for sid, (version, _, _) in published.items()}


def compare_heads(
    published: Published, chains: ChainCheck, key: bytes | None, *, links: bool
) -> list[Violation]:
    """A ``published_head`` violation for every published head the ledger no longer has: a
    signature that is not this chain key's, a stream gone or shorter than published, a link
    at the published version that differs (*links* False: a keyed chain read without its
    key, only versions are compared)."""
    found: list[Violation] = []

    def flag(sid: str, detail: str) -> None:
        found.append(Violation(position=0, rule="published_head", detail=f"{sid}: {detail}"))

    for sid, (version, head, signature) in sorted(published.items()):
        if key is not None and signature:
            expected = head_signature(key, sid, version, head)
            if not hmac.compare_digest(signature, expected):
                flag(sid, f"the published head v{version} is not signed by this ledger's key")
                continue
        stream = chains.streams.get(sid)
        if stream is None:
            flag(sid, f"published at v{version}, the stream is gone")
        elif stream.version < version:
            flag(sid, f"ends at v{stream.version}, published at v{version}: events lost")
        elif links and chains.wanted.get((sid, version)) != head:
            flag(sid, f"v{version} differs from the published link: rewritten since")
    return found
