"""A ledger written by real engines, and a raw connection to its database (SQLite file or
PostgreSQL) for the suites that edit rows behind the ledger's back (tamper, damage)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

__all__ = ["STORE_KINDS", "raw_store"]

STORE_KINDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@contextmanager
def raw_store(
    request: pytest.FixtureRequest, tmp_path: Path, history: Callable[[str], None]
) -> Iterator[tuple[str, str, Any]]:
    """``(kind, url, connection)`` of a store of kind ``request.param`` after *history*."""
    if request.param == "sqlite":
        path = tmp_path / "ledger.db"
        url = f"sqlite:///{path}"
        history(url)
        lite = sqlite3.connect(path)
        try:
            yield "sqlite", url, lite
        finally:
            lite.close()
    else:
        import psycopg

        url = str(request.getfixturevalue("pg_url"))
        history(url)
        with psycopg.connect(url, autocommit=False) as pg:
            yield "postgres", url, pg
