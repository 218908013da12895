"""Bounded, pure memo tables of the packing core (results never depend on them)."""

from __future__ import annotations

from typing import Any, TypeVar

__all__ = ["clear_caches", "memo_table", "remember"]

K = TypeVar("K")
V = TypeVar("V")

_TABLES: list[dict[Any, Any]] = []


def memo_table() -> dict[Any, Any]:
    """A new registered memo table (a plain dict: lookups stay as cheap as ``dict.get``)."""
    table: dict[Any, Any] = {}
    _TABLES.append(table)
    return table


def remember(table: dict[K, V], key: K, value: V, maxsize: int) -> V:
    """Store *value*; when full, forget the older half first (insertion order). Safe against
    concurrent eviction from another thread."""
    if len(table) >= maxsize:
        for old in list(table)[: maxsize // 2]:
            table.pop(old, None)
    table[key] = value
    return value


def clear_caches() -> None:
    """Forget every memoised term set, score fact, clip, excerpt and decision — e.g. at a
    generation refresh, to release items that left the pool."""
    for table in _TABLES:
        table.clear()
