"""The memory table's guard: triggers that refuse any write the catalog would not make.

Installed by every writable connection to a catalog (``catalog_store.connect_catalog``, which
``MemoryCatalog.open`` and ``CatalogStore.open`` both use), so a catalog opened by any path of
ctxledger has its guard, even one whose triggers were dropped by another tool."""

from __future__ import annotations

import sqlite3
from typing import Final

from ctxledger.domain.memory import MEMORY_STATES

__all__ = ["GUARD_SQL", "GUARD_TRIGGERS", "ensure_guard", "guard_sql"]

GUARD_TRIGGERS: Final = ("memory_guard_insert", "memory_guard_update", "memory_guard_delete")

_STATES_SQL: Final = ", ".join(f"'{s}'" for s in MEMORY_STATES)

_SHAPE_CHECKS: Final = f"""
  SELECT RAISE(ABORT, 'memory guard: payload is not JSON text')
   WHERE typeof(NEW.payload) IS NOT 'text' OR json_valid(NEW.payload) IS NOT 1;
  SELECT RAISE(ABORT, 'memory guard: payload is not schema version 2')
   WHERE json_type(NEW.payload, '$.schemaVersion') IS NOT 'integer'
      OR json_extract(NEW.payload, '$.schemaVersion') IS NOT 2;
  SELECT RAISE(ABORT, 'memory guard: partition is not an opaque ws_ id')
   WHERE json_type(NEW.payload, '$.partition') IS NOT 'text'
      OR length(json_extract(NEW.payload, '$.partition')) IS NOT 35
      OR json_extract(NEW.payload, '$.partition') NOT GLOB 'ws_*'
      OR substr(json_extract(NEW.payload, '$.partition'), 4) GLOB '*[^0-9a-f]*';
  SELECT RAISE(ABORT, 'memory guard: state is not one of {", ".join(MEMORY_STATES)}')
   WHERE json_type(NEW.payload, '$.state') IS NOT 'text'
      OR json_extract(NEW.payload, '$.state') NOT IN ({_STATES_SQL});
  SELECT RAISE(ABORT, 'memory guard: id is not a mem_ id or differs from the payload id')
   WHERE typeof(NEW.id) IS NOT 'text'
      OR NEW.id IS NOT json_extract(NEW.payload, '$.id')
      OR length(NEW.id) NOT BETWEEN 12 AND 68
      OR NEW.id NOT GLOB 'mem_*'
      OR substr(NEW.id, 5) GLOB '*[^0-9a-f]*';
  SELECT RAISE(ABORT, 'memory guard: revision is not a positive integer')
   WHERE json_type(NEW.payload, '$.revision') IS NOT 'integer'
      OR json_extract(NEW.payload, '$.revision') < 1;"""

GUARD_SQL: Final = (
    f"""CREATE TRIGGER memory_guard_insert BEFORE INSERT ON memory
BEGIN{_SHAPE_CHECKS}
  SELECT RAISE(ABORT, 'memory guard: id exists; entries change only through the catalog')
   WHERE EXISTS (SELECT 1 FROM memory WHERE id = NEW.id);
END""",
    f"""CREATE TRIGGER memory_guard_update BEFORE UPDATE ON memory
BEGIN{_SHAPE_CHECKS}
  SELECT RAISE(ABORT, 'memory guard: deleted entries are final')
   WHERE json_extract(OLD.payload, '$.state') IS 'deleted';
  SELECT RAISE(ABORT, 'memory guard: id and partition are immutable')
   WHERE NEW.id IS NOT OLD.id
      OR json_extract(NEW.payload, '$.partition') IS NOT json_extract(OLD.payload, '$.partition');
  SELECT RAISE(ABORT, 'memory guard: revision must grow by exactly one')
   WHERE json_extract(NEW.payload, '$.revision')
         IS NOT json_extract(OLD.payload, '$.revision') + 1;
END""",
    """CREATE TRIGGER memory_guard_delete BEFORE DELETE ON memory
WHEN json_extract(OLD.payload, '$.state') IS NOT 'deleted'
BEGIN
  SELECT RAISE(ABORT, 'memory guard: only erased (deleted) entries may be removed');
END""",
)


def guard_sql() -> tuple[str, ...]:
    """The CREATE TRIGGER statements of the guard (for docs and audits)."""
    return GUARD_SQL


def ensure_guard(conn: sqlite3.Connection) -> bool:
    """Install the guard on a catalog whose ``memory`` table (current layout) lacks any of
    its triggers; True when it did. A catalog with no memory table yet, or in the legacy
    layout (``MemoryCatalog.open`` migrates it, then installs the guard), is left alone."""
    columns = {str(r[1]) for r in conn.execute("PRAGMA table_xinfo(memory)").fetchall()}
    if "partition" not in columns:
        return False
    present = {
        str(r[0])
        for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall()
    }
    if present >= set(GUARD_TRIGGERS):
        return False
    conn.execute("BEGIN IMMEDIATE")
    try:
        for name in GUARD_TRIGGERS:
            conn.execute(f"DROP TRIGGER IF EXISTS {name}")
        for sql in GUARD_SQL:
            conn.execute(sql)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return True
