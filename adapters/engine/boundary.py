"""Argument checks at the engine's public boundary, from the methods' own type hints.

Python callers (and JSON-fed orchestrators) pass whatever they have: ``budget=8000.0``,
``pinned=1``, ``item_id=None``. Inside, such a value either fails deep in the planner with an
untyped ``TypeError`` or, worse, is encoded into an event that no reader can decode (the
ledger refuses those too: ``domain.codec.encode_checked``). ``checked`` validates every
argument against its annotation with pydantic in strict mode — no silent coercion: a float
is not an int, a bool is not an int, a str is not a list of str — and turns a refusal into
``InvalidInputError`` naming the argument, before anything is decided or written. The method
then runs with the caller's values as given (never pydantic's converted copies: a tuple stays
a tuple).

Then every string among the arguments (nested in Structs, lists and mappings too, and in
``**kwargs``) is checked against the engine's ``InputLimits`` (``domain.input_checks``): a
lone surrogate or an over-long value is an ``InvalidInputError`` naming the argument, before
anything is decided or written.

The validator is built on the first call of each method (not at import: the CLI's ``--help``
must not pay for pydantic schemas of the whole engine).
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any, TypeVar, cast

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.input_checks import TEXT_NAMES, check_strings
from ctxledger.domain.settings import InputLimits

__all__ = ["checked"]

F = TypeVar("F", bound=Callable[..., Any])

_CONFIG = ConfigDict(strict=True, arbitrary_types_allowed=True)
_PLAIN = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def _arguments_model(fn: Callable[..., Any]) -> tuple[inspect.Signature, type[BaseModel]]:
    """*fn*'s signature and a model of its annotated named parameters (``self`` and
    ``**kwargs`` are not checked here)."""
    signature = inspect.signature(fn)
    hints = typing.get_type_hints(fn)
    fields: dict[str, Any] = {
        name: (hints[name], ... if p.default is inspect.Parameter.empty else p.default)
        for name, p in signature.parameters.items()
        if p.kind in _PLAIN and name in hints
    }
    model = create_model(f"{fn.__qualname__}.arguments", __config__=_CONFIG, **fields)
    return signature, model


def _one_line(fn: Callable[..., Any], exc: ValidationError) -> str:
    first = exc.errors(include_url=False)[0]
    where = ".".join(str(p) for p in first["loc"]) or "arguments"
    got = repr(first.get("input"))
    got = got if len(got) <= 60 else got[:57] + "..."
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{fn.__name__}: {where}: {first['msg']}, got {got}{more}"


def _check_sizes(
    name: str, arguments: dict[str, Any], signature: inspect.Signature, limits: InputLimits
) -> None:
    for arg, value in arguments.items():
        kind = signature.parameters[arg].kind
        if arg == "self":
            continue
        if kind is inspect.Parameter.VAR_KEYWORD:
            for key, given in value.items():
                check_strings(given, f"{name}: {key}", limits, text=key in TEXT_NAMES)
        else:
            check_strings(value, f"{name}: {arg}", limits, text=arg in TEXT_NAMES)


def checked(fn: F) -> F:
    """*fn* with its arguments validated strictly against its annotations first."""
    built: tuple[inspect.Signature, type[BaseModel]] | None = None

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        nonlocal built
        if built is None:
            built = _arguments_model(fn)
        signature, model = built
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidInputError(f"{fn.__name__}: {exc}") from None
        given = {k: v for k, v in bound.arguments.items() if k in model.model_fields}
        try:
            model.model_validate(given)
        except ValidationError as exc:
            raise InvalidInputError(_one_line(fn, exc)) from None
        limits = getattr(args[0], "input_limits", None) if args else None
        if isinstance(limits, InputLimits):
            _check_sizes(fn.__name__, bound.arguments, signature, limits)
        return fn(*args, **kwargs)

    return cast(F, wrapper)
