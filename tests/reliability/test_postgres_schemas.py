"""Two ledgers in one PostgreSQL database via ``?schema=``: each keeps its own saved read
models (the table lives in the ledger's schema, not in ``public``)."""

from __future__ import annotations

import psycopg

from ctxledger.adapters.ledger import open_ledger


def test_saved_read_models_are_per_schema(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA a")
        conn.execute("CREATE SCHEMA b")
    a = open_ledger(pg_url + "?schema=a")
    b = open_ledger(pg_url + "?schema=b")
    try:
        a.save_projections({"m": b"state-a"}, 0)
        b.save_projections({"m": b"state-b"}, 0)
        assert a.load_projection("m") == (0, b"state-a")
        assert b.load_projection("m") == (0, b"state-b")
    finally:
        a.close()
        b.close()
