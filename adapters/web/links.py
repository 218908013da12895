"""The inspector's links and its template environment: every URL a page links to, built in
one place so an id holding any character round-trips."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from urllib.parse import quote, urlencode

import jinja2

from ctxledger.adapters.web import views
from ctxledger.adapters.web.charts import fmt_number, layer_colour, source_colour
from ctxledger.projections.build_trace import SCORE_PARTS

__all__ = [
    "agent_url",
    "build_url",
    "control_url",
    "diff_url",
    "environment",
    "generation_url",
    "item_url",
    "page_url",
    "query_url",
]


def agent_url(agent_id: str) -> str:
    return "/agents/" + quote(agent_id, safe="")


def generation_url(agent_id: str, number: int) -> str:
    return f"{agent_url(agent_id)}/generations/{int(number)}"


def diff_url(agent_id: str, a: int, b: int) -> str:
    return f"{agent_url(agent_id)}/diff?" + urlencode({"from": int(a), "to": int(b)})


def item_url(agent_id: str, item_id: str) -> str:
    return f"{agent_url(agent_id)}/items/" + quote(item_id, safe="")


def page_url(base: str, page: int, per: int, **extra: int | str) -> str:
    """*base* (a path) with the pager's query: ``page`` and, when not the default, ``per``
    (after *extra*, e.g. the sort and filters of an item table)."""
    query: dict[str, int | str] = {**extra, "page": int(page)}
    if per != views.DEFAULT_PER:
        query["per"] = int(per)
    return base + "?" + urlencode(query)


def query_url(base: str, params: dict[str, str]) -> str:
    """*base* with *params* (none: *base* itself)."""
    return base + "?" + urlencode(params) if params else base


def build_url(agent_id: str, pack_id: str) -> str:
    return f"{agent_url(agent_id)}/builds/" + quote(pack_id, safe="")


def control_url(agent_id: str) -> str:
    return f"{agent_url(agent_id)}/control"


def fmt_time(value: datetime | None) -> str:
    return value.isoformat(timespec="seconds") if value is not None else "—"


def short_path(value: str) -> str:
    """The last component of a path (``…/name``); pages put the full path in a title."""
    parts = [p for p in value.replace("\\", "/").split("/") if p]
    return value if len(parts) <= 1 else "…/" + parts[-1]


def environment(
    *, token: str, read_only: bool, store_label: str, catalog: Path | None
) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("ctxledger.adapters.web", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals.update(
        csrf_token=token,
        read_only=read_only,
        store_label=store_label,
        catalog_label=str(catalog) if catalog is not None else "",
        has_catalog=catalog is not None,
        agent_url=agent_url,
        generation_url=generation_url,
        diff_url=diff_url,
        item_url=item_url,
        page_url=page_url,
        query_url=query_url,
        build_url=build_url,
        score_parts=SCORE_PARTS,
        control_url=control_url,
        fmt_time=fmt_time,
        short_path=short_path,
        num=fmt_number,
        layer_colour=layer_colour,
        source_colour=source_colour,
    )
    return env
