"""Size and Unicode checks of every string a caller passes the engine (``InputLimits``)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import datetime
from typing import Final, TypeVar

import msgspec

from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.settings import InputLimits

__all__ = ["TEXT_NAMES", "check_strings", "check_text", "member"]

TEXT_NAMES: Final = frozenset(
    {"content", "text", "item", "evidence", "latest_user_input", "message", "error", "body"}
)
"""Argument and field names that hold a body of text (``InputLimits.text_bytes``); every
other string is a field (``InputLimits.field_bytes``)."""

_MAX_DEPTH: Final = 8
_SCALARS: Final = frozenset({int, float, bool, type(None), datetime})
E = TypeVar("E", bound=enum.Enum)


def check_text(value: str, where: str, limit: int) -> None:
    """Refuse *value* when it is not valid Unicode or longer than *limit* UTF-8 bytes."""
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidInputError(
            f"{where}: not valid Unicode (a lone surrogate at character {exc.start})"
        ) from None
    if size > limit:
        raise InvalidInputError(
            f"{where}: {size} bytes, above the limit of {limit} (EngineSettings.limits)"
        )


def check_strings(value: object, where: str, limits: InputLimits, *, text: bool = False) -> None:
    """Check every string in *value* (a string, a msgspec Struct, or a list, tuple, set or
    mapping of them, nested): *text* says whether a top-level string is a body of text;
    a Struct's fields are bodies when named in ``TEXT_NAMES``. A first pass only asks whether
    every string fits (no paths built); the second, which names the culprit, runs only when
    one does not."""
    if not _fits(value, limits, text, 0):
        _walk(value, where, limits, text, 0)


def _fits(value: object, limits: InputLimits, text: bool, depth: int) -> bool:
    if isinstance(value, str):
        limit = limits.text_bytes if text else limits.field_bytes
        if value.isascii():
            return len(value) <= limit
        try:
            return len(value.encode("utf-8")) <= limit
        except UnicodeEncodeError:
            return False
    if type(value) in _SCALARS or depth >= _MAX_DEPTH:
        return True
    if isinstance(value, msgspec.Struct):
        for name in value.__struct_fields__:
            field = getattr(value, name)
            if type(field) in _SCALARS:
                continue
            if not _fits(field, limits, name in TEXT_NAMES, depth + 1):
                return False
    elif isinstance(value, list | tuple | set | frozenset):
        for element in value:
            if not _fits(element, limits, text, depth + 1):
                return False
    elif isinstance(value, Mapping):
        for key, element in value.items():
            if not (
                _fits(key, limits, False, depth + 1) and _fits(element, limits, text, depth + 1)
            ):
                return False
    return True


def _walk(value: object, where: str, limits: InputLimits, text: bool, depth: int) -> None:
    kind = type(value)
    if kind is str:
        check_text(value, where, limits.text_bytes if text else limits.field_bytes)  # type: ignore[arg-type]
        return
    if kind in _SCALARS or depth >= _MAX_DEPTH:
        return
    if isinstance(value, str):
        if not isinstance(value, enum.Enum):
            check_text(value, where, limits.text_bytes if text else limits.field_bytes)
    elif isinstance(value, msgspec.Struct):
        for name in value.__struct_fields__:
            field = getattr(value, name)
            if type(field) not in _SCALARS:
                _walk(field, f"{where}.{name}", limits, name in TEXT_NAMES, depth + 1)
    elif isinstance(value, list | tuple | set | frozenset):
        for n, element in enumerate(value):
            if type(element) not in _SCALARS:
                _walk(element, f"{where}[{n}]", limits, text, depth + 1)
    elif isinstance(value, Mapping):
        for key, element in value.items():
            _walk(key, f"{where} key", limits, False, depth + 1)
            _walk(element, f"{where}[{str(key)[:40]!r}]", limits, text, depth + 1)


def member(kind: type[E], value: object, where: str) -> E:
    """*value* as a member of the enum *kind* (a member, a member's value or name); anything
    else is an InvalidInputError naming the choices."""
    if isinstance(value, kind):
        return value
    if isinstance(value, str) and value in kind.__members__:
        return kind[value]
    try:
        if isinstance(value, bool):
            raise TypeError
        return kind(value)
    except (ValueError, TypeError):
        choices = ", ".join(m.name if isinstance(m, int) else str(m.value) for m in kind)
        shown = repr(value)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        raise InvalidInputError(f"{where}: {shown} is not one of {choices}") from None
