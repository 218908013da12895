"""Invariants of the web inspector's form handling and chart geometry (Hypothesis)."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from ctxledger.adapters.web.charts import bar_chart, grouped_chart, nice_ceiling, usage_bar
from ctxledger.adapters.web.controls import (
    ACTIONS,
    ITEM_ACTIONS,
    FormError,
    check_origin,
    check_token,
    parse_control,
    parse_form,
)

FIELD_NAMES = ("csrf_token", "action", "item_id", "memory_id", "reason", "evidence", "next")
FORM = "application/x-www-form-urlencoded"
counts = st.integers(min_value=0, max_value=10**9)
text = st.text(st.characters(codec="utf-8"), max_size=60)


@given(used=counts, budget=counts)
def test_usage_bar_stays_inside_its_box_and_reports_overflow(used: int, budget: int) -> None:
    u = usage_bar(used, budget, width=640)
    assert 0 <= u.fill <= 640
    assert 0 <= u.budget_x <= 640
    assert u.overflow == (max(0, used - budget) if budget else 0)
    if budget and used <= budget:
        assert u.budget_x == 640
        assert u.fill == pytest.approx(640 * used / budget, abs=0.01)
    if used > budget > 0:
        assert u.fill == 640
        assert u.budget_x == pytest.approx(640 * budget / used, abs=0.01)


@given(st.dictionaries(st.text(min_size=1, max_size=12), counts, max_size=15))
def test_bar_widths_are_proportional_to_values(rows: dict[str, int]) -> None:
    c = bar_chart(rows, width=520, label_width=170)
    plot = 520 - 170 - 70
    assert [b.label for b in c.bars] == list(rows)
    assert c.total == sum(rows.values())
    for a in c.bars:
        assert 0 <= a.w <= plot
        assert a.text == str(int(a.value))
        for b in c.bars:
            if a.value >= b.value:
                assert a.w >= b.w


@given(
    st.lists(
        st.tuples(st.floats(0, 1e9, allow_nan=False), st.floats(0, 1e9, allow_nan=False)),
        min_size=1,
        max_size=12,
    ),
    st.booleans(),
)
@example(pairs=[(0.0, 5e-324)], percent=False)  # too small to scale: the axis falls back to 1
def test_grouped_bars_stay_inside_the_plot(pairs: list[tuple[float, float]], percent: bool) -> None:
    values_a = [min(a, 1.0) if percent else a for a, _ in pairs]
    values_b = [min(b, 1.0) if percent else b for _, b in pairs]
    c = grouped_chart(
        [f"g{i}" for i in range(len(pairs))],
        [("a", "#000", values_a), ("b", "#111", values_b)],
        percent=percent,
        width=640,
        height=220,
    )
    assert len(c.bars) == 2 * len(pairs)
    bottom = c.top + c.plot_height
    for bar in c.bars:
        assert bar.h >= 0
        assert bar.y >= c.top - 0.01
        assert bar.y + bar.h <= bottom + 0.01
        assert 0 <= bar.x <= 640


@given(st.floats(min_value=1e-6, max_value=1e12, allow_nan=False))
def test_axis_top_is_a_round_number_just_above_the_data(value: float) -> None:
    top = nice_ceiling(value)
    assert top >= value * (1 - 1e-9)
    assert top <= 1.5 * value * (1 + 1e-9)
    mantissa = float(f"{top:.12e}".split("e")[0])
    assert mantissa in (1.0, 1.2, 1.6, 2.0, 3.0, 4.0, 6.0, 8.0)


@given(st.dictionaries(st.sampled_from(FIELD_NAMES), text, max_size=len(FIELD_NAMES)))
def test_form_encoding_round_trips(fields: dict[str, str]) -> None:
    assert parse_form(urlencode(fields).encode(), FORM) == fields


@given(name=st.text(min_size=1, max_size=10).filter(lambda n: n not in FIELD_NAMES))
def test_unknown_fields_are_refused(name: str) -> None:
    with pytest.raises(FormError) as err:
        parse_form(urlencode({name: "x"}).encode(), FORM)
    assert err.value.status == 400


@given(secret=st.text(min_size=16, max_size=40), given_token=text)
def test_only_the_exact_token_passes(secret: str, given_token: str) -> None:
    if given_token == secret:
        check_token({"csrf_token": given_token}, secret)
    else:
        with pytest.raises(FormError) as err:
            check_token({"csrf_token": given_token}, secret)
        assert err.value.status == 403


@given(st.dictionaries(st.sampled_from(FIELD_NAMES), text, max_size=len(FIELD_NAMES)))
def test_accepted_control_forms_are_well_formed(fields: dict[str, str]) -> None:
    status = 0
    try:
        form = parse_control(fields)
    except FormError as err:
        status = err.status
    if status:
        assert status == 400
        return
    assert form.action in ACTIONS
    assert bool(form.item_id) == (form.action in ITEM_ACTIONS)
    assert not form.memory_id
    assert form.next == "" or (form.next.startswith("/agents/") and "//" not in form.next)
    for value in (form.item_id, form.reason, form.evidence, form.next):
        assert not any(ord(ch) < 32 for ch in value)


@given(host=st.sampled_from(["evil.example", "127.0.0.1:9", "localhost:8765", "null"]))
def test_other_origins_are_refused(host: str) -> None:
    origin = "null" if host == "null" else f"http://{host}"
    with pytest.raises(FormError) as err:
        check_origin(origin, None, "http://127.0.0.1:8765")
    assert err.value.status == 403
    check_origin("http://127.0.0.1:8765", "same-origin", "http://127.0.0.1:8765")
