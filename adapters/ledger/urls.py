"""Store URLs: ``memory://``, ``sqlite:///path`` and ``postgresql://…`` — which kind of store a
URL names, the SQLite file it points to, and the URL as it may be shown (no password)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from ctxledger.domain.errors import StoreURLError

__all__ = ["SQLITE_PREFIX", "StoreScheme", "redact", "sqlite_file", "store_scheme"]

SQLITE_PREFIX = "sqlite:///"
StoreScheme = Literal["memory", "sqlite", "postgresql"]


def redact(url: str) -> str:
    """*url* with its password (if any) replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@")
    return url


def store_scheme(url: str) -> StoreScheme:
    """The kind of store *url* names (``postgres://`` is ``postgresql``); StoreURLError for
    any other scheme."""
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme == "memory":
        return "memory"
    if scheme == "sqlite":
        return "sqlite"
    if scheme in ("postgresql", "postgres"):
        return "postgresql"
    raise StoreURLError(
        f"{redact(url)}: unknown store URL scheme (use memory://, sqlite:///path or "
        "postgresql://user@host/db)"
    )


def sqlite_file(url: str) -> Path:
    """The file of the SQLite ledger *url* names, refused (StoreURLError) when the URL has no
    path, the path is a directory or its directory does not exist."""
    if not url.startswith(SQLITE_PREFIX) or len(url) <= len(SQLITE_PREFIX):
        raise StoreURLError(f"{url}: expected sqlite:///path/to/ledger.db")
    path = Path(url[len(SQLITE_PREFIX) :])
    if path.is_dir():
        raise StoreURLError(f"{url}: {path} is a directory")
    if not path.parent.exists():
        raise StoreURLError(f"{url}: directory {path.parent} does not exist")
    return path
