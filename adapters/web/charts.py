"""Chart geometry for the inspector's inline SVG (the templates draw it; nothing runs in JS)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

__all__ = [
    "DENSE",
    "MAX_LABELS",
    "Bar",
    "BarChart",
    "GroupedChart",
    "UsageBar",
    "bar_chart",
    "fmt_number",
    "grouped_chart",
    "label_step",
    "layer_colour",
    "nice_ceiling",
    "source_colour",
    "usage_bar",
]

_LAYER_COLOURS = {
    "L0": "#d97706",
    "L1": "#2563eb",
    "L2": "#059669",
    "L3": "#7c3aed",
    "L4": "#6b7280",
}
_SOURCE_PALETTE = (
    "#2563eb",
    "#059669",
    "#d97706",
    "#7c3aed",
    "#db2777",
    "#0891b2",
    "#65a30d",
    "#dc2626",
    "#4b5563",
    "#9333ea",
    "#ea580c",
    "#0d9488",
    "#b45309",
    "#1d4ed8",
    "#be123c",
)
_SOURCES = (
    "user_requirement",
    "steering_note",
    "role_instruction",
    "verified_fact",
    "worker_finding",
    "unverified_hypothesis",
    "generated_summary",
    "test_result",
    "repository_source",
    "parent_report",
    "recalled_memory",
    "tool_log",
    "conversation",
    "artifact",
    "event_history",
)


def fmt_number(value: float) -> str:
    """An integer-valued number without a decimal point; other values to 3 significant digits."""
    return str(int(value)) if float(value).is_integer() else f"{value:.3g}"


_NICE = (1.0, 1.2, 1.6, 2.0, 3.0, 4.0, 6.0, 8.0, 10.0)


def nice_ceiling(value: float) -> float:
    """The smallest "round" number ≥ *value* whose quarters are round too (1 for values
    too small to scale, ≤ 1e-9)."""
    if not value > 1e-9:
        return 1.0
    scale = 10.0 ** math.floor(math.log10(value))
    for m in _NICE:
        if m * scale >= value * (1 - 1e-12):
            return float(f"{m * scale:.12g}")
    return 10.0 * scale  # pragma: no cover - _NICE ends at 10


def layer_colour(layer: str) -> str:
    """A fixed colour per layer name (``L0``–``L4``); grey for anything else."""
    return _LAYER_COLOURS.get(layer, "#9ca3af")


def source_colour(source: str) -> str:
    """A fixed colour per provenance source; grey for an unknown one."""
    if source in _SOURCES:
        return _SOURCE_PALETTE[_SOURCES.index(source) % len(_SOURCE_PALETTE)]
    return "#9ca3af"


@dataclasses.dataclass(frozen=True, slots=True)
class UsageBar:
    """A horizontal usage-vs-budget bar: the filled width and where the budget line sits."""

    width: int
    height: int
    used: int
    budget: int
    fill: float
    budget_x: float
    overflow: int
    percent: str


def usage_bar(used: int, budget: int, *, width: int = 640, height: int = 26) -> UsageBar:
    """Geometry of a usage bar. Above the budget, the scale stretches to the usage so the
    overflow shows as the part beyond the budget line."""
    used = max(used, 0)
    budget = max(budget, 0)
    scale = max(used, budget, 1)
    percent = f"{used / budget:.0%}" if budget else "no budget"
    return UsageBar(
        width=width,
        height=height,
        used=used,
        budget=budget,
        fill=round(width * used / scale, 2),
        budget_x=round(width * budget / scale, 2) if budget else float(width),
        overflow=max(0, used - budget) if budget else 0,
        percent=percent,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Bar:
    """One bar: its label, value, geometry and colour."""

    label: str
    value: float
    text: str
    x: float
    y: float
    w: float
    h: float
    colour: str


@dataclasses.dataclass(frozen=True, slots=True)
class BarChart:
    """A horizontal bar chart (label column, bars, value text)."""

    width: int
    height: int
    label_width: int
    bars: tuple[Bar, ...]
    total: float


def bar_chart(
    rows: Mapping[str, float] | Sequence[tuple[str, float]],
    *,
    colour: str | None = None,
    colours: Mapping[str, str] | None = None,
    width: int = 520,
    label_width: int = 170,
    row_height: int = 22,
    unit: str = "",
) -> BarChart:
    """Horizontal bars, one per row, scaled to the largest value (0 draws nothing)."""
    pairs = list(rows.items()) if isinstance(rows, Mapping) else list(rows)
    biggest = max((v for _, v in pairs), default=0) or 1
    plot = width - label_width - 70
    bars = []
    for i, (label, value) in enumerate(pairs):
        w = round(plot * max(value, 0) / biggest, 2)
        bars.append(
            Bar(
                label=label,
                value=value,
                text=fmt_number(value) + unit,
                x=float(label_width),
                y=float(i * row_height + 3),
                w=w,
                h=float(row_height - 6),
                colour=(colours or {}).get(label, colour or "#2563eb"),
            )
        )
    return BarChart(
        width=width,
        height=max(len(pairs), 1) * row_height,
        label_width=label_width,
        bars=tuple(bars),
        total=sum(v for _, v in pairs),
    )


@dataclasses.dataclass(frozen=True, slots=True)
class GroupedChart:
    """Vertical bars grouped by x category (e.g. generation), one series per colour."""

    width: int
    height: int
    top: int
    plot_height: int
    max_value: float
    ticks: tuple[tuple[float, str], ...]
    categories: tuple[tuple[float, str], ...]
    bars: tuple[Bar, ...]
    series: tuple[tuple[str, str], ...]
    paths: tuple[tuple[str, str, str], ...] = ()
    """Past ``DENSE`` categories: each series as one SVG path (name, colour, ``d``) instead
    of one titled bar per value, so the chart stays a few KB; the tables hold the values."""


_STEPS = (1, 2, 5)
MAX_LABELS = 25
DENSE = 60
"""Category labels a grouped chart writes at most; past that it names every k-th."""


def label_step(count: int, plot_width: float, *, longest: int = 4, char_px: float = 6.5) -> int:
    """Name every k-th of *count* categories: the smallest k of 1, 2, 5, 10, 20, 50, … that
    keeps at most ``MAX_LABELS`` labels and leaves each label (*longest* characters wide
    at about *char_px* pixels each, plus a gap) room between its neighbours."""
    if count <= 1:
        return 1
    slot = plot_width / count
    need = longest * char_px + 6
    scale = 1
    while True:
        for m in _STEPS:
            k = m * scale
            if math.ceil(count / k) <= MAX_LABELS and slot * k >= need:
                return k
        scale *= 10


def grouped_chart(
    categories: Sequence[str],
    series: Sequence[tuple[str, str, Sequence[float]]],
    *,
    max_value: float | None = None,
    percent: bool = False,
    width: int = 640,
    height: int = 220,
) -> GroupedChart:
    """Vertical grouped bars: *series* is ``(name, colour, values per category)``.

    ``percent`` formats values in 0..1 as percentages (and fixes the scale at 1)."""
    left, right, top, bottom = 56, 12, 22, 34
    plot_w = width - left - right
    plot_h = height - top - bottom
    top_value = (
        1.0
        if percent
        else nice_ceiling(max([max_value or 0.0, *(v for s in series for v in s[2])]))
    )
    n = max(len(categories), 1)
    group_w = plot_w / n
    k = max(len(series), 1)
    bar_w = max(group_w * 0.8 / k, 1.0)
    step = label_step(len(categories), plot_w, longest=max((len(c) for c in categories), default=1))
    bars: list[Bar] = []
    cats: list[tuple[float, str]] = []
    for ci, cat in enumerate(categories):
        gx = left + ci * group_w + group_w * 0.1
        if ci % step == 0:
            cats.append((round(left + ci * group_w + group_w / 2, 2), cat))
        for si, (name, colour, values) in enumerate(series):
            value = values[ci] if ci < len(values) else 0.0
            h = plot_h * min(max(value, 0.0), top_value) / top_value
            bars.append(
                Bar(
                    label=f"{name} · {cat}",
                    value=value,
                    text=f"{value:.0%}" if percent else fmt_number(value),
                    x=round(gx + si * bar_w, 2),
                    y=round(top + plot_h - h, 2),
                    w=round(bar_w, 2),
                    h=round(h, 2),
                    colour=colour,
                )
            )
    ticks = tuple(
        (
            round(top + plot_h - plot_h * f, 2),
            f"{top_value * f:.0%}" if percent else fmt_number(top_value * f),
        )
        for f in (0.0, 0.25, 0.5, 0.75, 1.0)
    )
    paths: tuple[tuple[str, str, str], ...] = ()
    if len(categories) > DENSE:
        paths = tuple(
            (name, colour, " ".join(_rect_path(b) for b in bars[si :: len(series)]))
            for si, (name, colour, _) in enumerate(series)
        )
        bars = []
    return GroupedChart(
        width=width,
        height=height,
        top=top,
        plot_height=plot_h,
        max_value=top_value,
        ticks=ticks,
        categories=tuple(cats),
        bars=tuple(bars),
        series=tuple((name, colour) for name, colour, _ in series),
        paths=paths,
    )


def _rect_path(b: Bar) -> str:
    """One bar as a closed subpath (``M x y h w v h h -w z``), numbers to 0.1 px."""
    return f"M{b.x:.1f} {b.y:.1f}h{b.w:.1f}v{b.h:.1f}h{-b.w:.1f}z"
