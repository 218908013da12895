"""The PostgreSQL store (``postgresql://user@host:port/dbname?schema=…``): eventsourcing's
PostgreSQL recorder (appends inserted in chunks), read models and the quarantine in the same
schema, LISTEN/NOTIFY for followers, advisory locks for writers (``stream_locks``). Needs the
``postgres`` extra."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from eventsourcing.persistence import (
    ApplicationRecorder,
    OperationalError,
    PersistenceError,
    StoredEvent,
)

from ctxledger.adapters.ledger.backend import (
    EVENTS_TABLE,
    PROJECTIONS_TABLE,
    QUARANTINE_TABLE,
    NoHeadFile,
)
from ctxledger.adapters.ledger.locks import UNAVAILABLE_AFTER_S, PgStreamLocks, StreamLocks
from ctxledger.adapters.ledger.urls import redact
from ctxledger.adapters.security.key_table import KeyTable, PgKeyTable
from ctxledger.domain.errors import LedgerUnavailableError, StoreKindError, StoreURLError

__all__ = ["PG_CHUNK", "PostgresBackend", "chunked_recorder", "conninfo_of"]


def conninfo_of(url: str) -> tuple[dict[str, Any], dict[str, str]]:
    """psycopg's connection keywords for a ``postgresql://`` *url* (user and password from
    ``PGUSER``/``PGPASSWORD`` when the URL has none) and the URL's query (``schema``)."""
    parts = urlsplit(url)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    dbname = unquote(parts.path.lstrip("/"))
    if not dbname or not parts.hostname:
        raise StoreURLError(f"{redact(url)}: expected postgresql://user@host:port/dbname")
    conninfo: dict[str, Any] = {
        "dbname": dbname,
        "host": parts.hostname,
        "port": parts.port or 5432,
        "user": unquote(parts.username or os.environ.get("PGUSER", "postgres")),
        "password": unquote(parts.password or os.environ.get("PGPASSWORD", "")),
    }
    return conninfo, query


class PostgresBackend(NoHeadFile):
    outages = True
    queued_writes = False  # the server queues writers itself

    def __init__(self, url: str, *, must_exist: bool = False) -> None:
        from ctxledger.adapters.extras import require_extra

        require_extra("postgres", "a postgresql:// store")
        import psycopg
        from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore

        self._conninfo, query = conninfo_of(url)
        schema = query.get("schema", "")
        try:
            self.datastore = PostgresDatastore(
                self._conninfo["dbname"],
                self._conninfo["host"],
                self._conninfo["port"],
                self._conninfo["user"],
                self._conninfo["password"],
                schema=schema,
                originator_id_type="text",
                pool_size=2,
                max_overflow=4,
                # the wait for a pooled connection; eventsourcing tries a call 10 times with
                # 0.2 s pauses, so a server that does not answer fails a call within
                # UNAVAILABLE_AFTER_S (10 × (wait + 0.2 s))
                connect_timeout=UNAVAILABLE_AFTER_S / 10 - 0.2,
            )
            _refuse_encoding(self.datastore, url)
            recorder = chunked_recorder(PostgresApplicationRecorder)(
                self.datastore, events_table_name=EVENTS_TABLE
            )
            if must_exist:  # a reader: never create tables, say what is missing
                self._refuse_missing(url, schema)
            else:
                self._create_tables(recorder, schema)
        except (PersistenceError, OperationalError, psycopg.Error) as exc:
            raise LedgerUnavailableError(f"{redact(url)}: {exc}") from exc
        self.recorder: ApplicationRecorder = recorder
        self._channel = recorder.channel_name
        self._listener: Any = None

    def _refuse_missing(self, url: str, schema: str) -> None:
        """A reader's check: StoreKindError when the database holds no ledger."""
        table = f"{schema}.{EVENTS_TABLE}" if schema else EVENTS_TABLE
        with self.datastore.transaction(commit=False) as c:
            c.execute("SELECT to_regclass(%s) IS NOT NULL AS found", (table,))
            row = c.fetchone()
        if not row or not row["found"]:
            self.datastore.close()
            raise StoreKindError(
                f"{redact(url)}: no ledger in this database (no {EVENTS_TABLE} table)"
            )

    def _create_tables(self, recorder: Any, schema: str) -> None:
        """A writer's tables (and its ``?schema=``, made when missing), one writer at a time."""
        with _schema_lock(self._conninfo):
            if schema:
                from psycopg.sql import SQL, Identifier

                with self.datastore.transaction(commit=True) as c:
                    c.execute(SQL("CREATE SCHEMA IF NOT EXISTS {}").format(Identifier(schema)))
            recorder.create_table()
            with self.datastore.transaction(commit=True) as c:
                c.execute(
                    f"CREATE TABLE IF NOT EXISTS {self._projections} ("
                    "name text PRIMARY KEY, position bigint NOT NULL, "
                    "state bytea NOT NULL)"
                )

    def stream_locks(self) -> StreamLocks:
        import psycopg

        conninfo = self._conninfo
        return PgStreamLocks(
            lambda: psycopg.connect(**conninfo, autocommit=True, connect_timeout=10),
            namespace=self.datastore.schema if self.datastore.schema != "public" else "",
        )

    def select_rows(
        self, after: int, upto: int | None, limit: int, *, streams: bool
    ) -> list[tuple[Any, ...]]:
        """Straight from eventsourcing's table, as plain tuples: no Notification per row."""
        from psycopg.rows import tuple_row
        from psycopg.sql import SQL, Identifier

        columns = (
            "notification_id, originator_id, originator_version, topic, state"
            if (streams)
            else "notification_id, topic, state"
        )
        sql = f"SELECT {columns} FROM {{schema}}.{{table}} WHERE notification_id > %s"
        params: tuple[int, ...] = (after,)
        if upto is not None:
            sql += " AND notification_id <= %s"
            params += (upto,)
        statement = SQL(sql + " ORDER BY notification_id LIMIT %s").format(
            schema=Identifier(self.datastore.schema), table=Identifier(EVENTS_TABLE)
        )
        with self.datastore.get_connection() as conn, conn.cursor(row_factory=tuple_row) as cur:
            cur.execute(statement, (*params, limit), prepare=True)
            rows: list[tuple[Any, ...]] = cur.fetchall()
        return rows

    def load_projection(self, name: str) -> tuple[int, bytes] | None:
        with self.datastore.transaction(commit=False) as c:
            c.execute(
                f"SELECT position, state FROM {self._projections} WHERE name=%s",
                (name,),
            )
            row = c.fetchone()
        return None if row is None else (int(row["position"]), bytes(row["state"]))

    def save_projections(self, states: dict[str, bytes], position: int) -> None:
        with self.datastore.transaction(commit=True) as c:
            for name, state in states.items():
                c.execute(
                    f"INSERT INTO {self._projections} (name, position, state) "
                    "VALUES (%s,%s,%s) ON CONFLICT (name) DO UPDATE SET "
                    "position=excluded.position, state=excluded.state",
                    (name, position, state),
                )

    def drop_projections_after(self, position: int) -> None:
        with self.datastore.transaction(commit=True) as c:
            c.execute(f"DELETE FROM {self._projections} WHERE position>%s", (position,))

    @property
    def _projections(self) -> str:
        """The saved-read-models table in this ledger's schema (``?schema=`` isolates it)."""
        schema = (self.datastore.schema or "public").replace('"', '""')
        return f'"{schema}".{PROJECTIONS_TABLE}'

    def _table(self, name: str) -> Any:
        from psycopg.sql import SQL, Identifier

        return SQL("{}.{}").format(Identifier(self.datastore.schema), Identifier(name))

    def quarantined_rows(self) -> list[tuple[Any, ...]]:
        from psycopg.rows import tuple_row
        from psycopg.sql import SQL

        with self.datastore.get_connection() as conn, conn.cursor(row_factory=tuple_row) as cur:
            cur.execute(
                "SELECT 1 FROM information_schema.tables WHERE table_schema=%s AND table_name=%s",
                (self.datastore.schema, QUARANTINE_TABLE),
            )
            if cur.fetchone() is None:
                return []
            cur.execute(
                SQL(
                    "SELECT position, originator_id, originator_version, topic, state, kind, "
                    "reason, quarantined_at FROM {} ORDER BY position"
                ).format(self._table(QUARANTINE_TABLE))
            )
            rows: list[tuple[Any, ...]] = cur.fetchall()
        return rows

    def quarantine(self, entries: Sequence[tuple[int, str, str]], at: str) -> int:
        from psycopg.sql import SQL

        quarantine, events = self._table(QUARANTINE_TABLE), self._table(EVENTS_TABLE)
        moved = 0
        with self.datastore.transaction(commit=True) as c:
            c.execute(
                SQL(
                    "CREATE TABLE IF NOT EXISTS {} (position bigint PRIMARY KEY, "
                    "originator_id text, originator_version bigint, topic text, state bytea, "
                    "kind text NOT NULL, reason text NOT NULL, quarantined_at text NOT NULL)"
                ).format(quarantine)
            )
            for position, kind, reason in entries:
                c.execute(
                    SQL(
                        "INSERT INTO {} SELECT notification_id, originator_id, "
                        "originator_version, topic, state, %s, %s, %s FROM {} "
                        "WHERE notification_id=%s"
                    ).format(quarantine, events),
                    (kind, reason, at, position),
                )
                c.execute(
                    SQL("DELETE FROM {} WHERE notification_id=%s").format(events), (position,)
                )
                moved += c.rowcount
            first = min(p for p, _, _ in entries)
            c.execute(f"DELETE FROM {self._projections} WHERE position>=%s", (first,))
        return moved

    def wait_for_new(self, timeout: float) -> None:
        """Block on LISTEN until a NOTIFY or *timeout*; fall back to sleeping."""
        import psycopg

        try:
            if self._listener is None or self._listener.closed:
                self._listener = psycopg.connect(**self._conninfo, autocommit=True)
                self._listener.execute(f'LISTEN "{self._channel}"')
            for _ in self._listener.notifies(timeout=timeout, stop_after=1):
                break
        except psycopg.Error:
            self._listener = None
            time.sleep(timeout)  # polling: the follower's interval

    def key_table(self) -> KeyTable:
        import psycopg

        conninfo = self._conninfo
        return PgKeyTable(
            lambda: psycopg.connect(**conninfo, autocommit=True, connect_timeout=10),
            self.datastore.schema,
        )

    def close(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(Exception):
                self._listener.close()
        self.datastore.close()


PG_CHUNK = 1000
"""Rows per INSERT of one append on PostgreSQL: one statement of 10,000 rows never returned
(psycopg's pipeline waiting on the server while the server waited for the rest of the
statement); chunks of this many, in the one transaction, keep an append atomic."""


def chunked_recorder(base: type[Any]) -> type[Any]:
    """eventsourcing's PostgreSQL recorder, inserting a large append in chunks of
    ``PG_CHUNK`` rows within one transaction (all or nothing, as before)."""
    from eventsourcing.utils import retry
    from psycopg import InterfaceError as PgInterfaceError
    from psycopg import OperationalError as PgOperationalError

    class ChunkedRecorder(base):  # type: ignore[misc]
        @retry((PgInterfaceError, PgOperationalError), max_attempts=10, wait=0.2)
        def insert_events(
            self, stored_events: Sequence[StoredEvent], **kwargs: Any
        ) -> Sequence[int] | None:
            if len(stored_events) <= PG_CHUNK or self.datastore.enable_db_functions:
                return super().insert_events.__wrapped__(self, stored_events, **kwargs)  # type: ignore[no-any-return]
            failed: Exception | None = None
            ids: list[int] = []
            with self.datastore.get_connection() as conn:
                with conn.pipeline() as pipeline, conn.transaction():
                    for at in range(0, len(stored_events), PG_CHUNK):
                        chunk = stored_events[at : at + PG_CHUNK]
                        with conn.cursor() as curs:
                            try:
                                self._insert_stored_events(curs, chunk, **kwargs)
                                pipeline.sync()  # a key violation raises here
                                ids += self._fetch_ids_after_insert_events(curs, chunk) or []
                            except Exception as exc:  # re-raised once the pipeline closed
                                failed = exc
                                break
                if failed is not None:
                    raise failed
            return ids

    return ChunkedRecorder


def _refuse_encoding(datastore: Any, url: str) -> None:
    """Refuse a database whose encoding is not UTF-8 (``SQL_ASCII`` accepts the bytes of
    every append and then fails every call, so its rows land and read back broken)."""
    with datastore.transaction(commit=False) as c:
        c.execute(
            "SELECT pg_encoding_to_char(encoding) AS enc FROM pg_database "
            "WHERE datname = current_database()"
        )
        row = c.fetchone()
    found = row["enc"] if row else ""
    # (a SQL_ASCII database hands text back as bytes)
    encoding = found.decode("ascii", "replace") if isinstance(found, bytes) else str(found)
    if encoding.upper() not in ("UTF8", "UTF-8"):
        datastore.close()
        raise StoreKindError(
            f"{redact(url)}: the database's encoding is {encoding or 'unknown'}, not UTF8: "
            "ctxledger stores UTF-8 text (CREATE DATABASE … ENCODING 'UTF8')"
        )


_SCHEMA_LOCK_KEY = 0x6374786C6C6467  # advisory lock id: "ctxlldg"


@contextlib.contextmanager
def _schema_lock(conninfo: dict[str, Any]) -> Iterator[None]:
    """Serialise schema creation across processes. Run concurrently, eventsourcing's
    ``CREATE OR REPLACE FUNCTION``/``CREATE TYPE`` fail with "tuple concurrently updated",
    so orchestrators starting together could not open a shared ledger. The lock is held by
    its own session; closing the session releases it."""
    import psycopg

    with psycopg.connect(**conninfo, autocommit=True, connect_timeout=10) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_SCHEMA_LOCK_KEY,))
        yield
