"""Input checks: every string, nested or not, is valid Unicode and within its limit."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.input_checks import check_strings, member
from ctxledger.domain.model import Item, Layer, Source
from ctxledger.domain.settings import InputLimits

LIMITS = InputLimits(text_bytes=40, field_bytes=10)
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=30)


def _valid(text: str, limit: int) -> bool:
    try:
        return len(text.encode("utf-8")) <= limit
    except UnicodeEncodeError:
        return False


@given(ANY_TEXT, st.booleans())
def test_a_string_is_refused_exactly_when_invalid_or_too_long(text: str, is_text: bool) -> None:
    limit = LIMITS.text_bytes if is_text else LIMITS.field_bytes
    if _valid(text, limit):
        check_strings(text, "arg", LIMITS, text=is_text)
    else:
        with pytest.raises(InvalidInputError, match=r"^arg: "):
            check_strings(text, "arg", LIMITS, text=is_text)


@given(ANY_TEXT)
def test_nested_strings_are_checked_and_named(text: str) -> None:
    item = Item(id="i", layer=Layer.L0, source=Source.TOOL_LOG, content="ok", files=("a", text))
    nested = {"k": [item]}
    if _valid(text, LIMITS.field_bytes):
        check_strings(nested, "call: x", LIMITS)
    else:
        with pytest.raises(InvalidInputError, match=r"^call: x\['k'\]\[0\]\.files\[1\]: "):
            check_strings(nested, "call: x", LIMITS)


def test_content_has_the_text_limit_and_other_fields_the_field_limit() -> None:
    check_strings(
        Item(id="i", layer=Layer.L0, source=Source.TOOL_LOG, content="c" * 40), "a", LIMITS
    )
    with pytest.raises(InvalidInputError, match=r"a\.content: 41 bytes, above the limit of 40"):
        check_strings(
            Item(id="i", layer=Layer.L0, source=Source.TOOL_LOG, content="c" * 41), "a", LIMITS
        )
    with pytest.raises(InvalidInputError, match=r"a\.task: 11 bytes, above the limit of 10"):
        check_strings(
            Item(id="i", layer=Layer.L0, source=Source.TOOL_LOG, content="c", task="t" * 11),
            "a",
            LIMITS,
        )
    with pytest.raises(InvalidInputError, match="5 bytes"):  # bytes, not characters
        check_strings("éé" * 1 + "x", "a", InputLimits(text_bytes=4, field_bytes=4))


def test_member_takes_members_values_and_names_and_refuses_the_rest() -> None:
    assert member(Layer, Layer.L2, "layer") is Layer.L2
    assert member(Layer, 2, "layer") is Layer.L2
    assert member(Layer, "L2", "layer") is Layer.L2
    assert member(Source, "tool_log", "source") is Source.TOOL_LOG
    for bad in ("L9", True, None, 9, "bogus"):
        with pytest.raises(InvalidInputError, match="is not one of"):
            member(Layer, bad, "layer")
    with pytest.raises(InvalidInputError, match="source: 'bogus' is not one of user_requirement"):
        member(Source, "bogus", "source")
