"""What the inspector reads from a request: bounded form bodies, checked query parameters and
the agent route's raw path segments (every bad value a 400 or 404, never a 500)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, unquote

from starlette.exceptions import HTTPException
from starlette.requests import Request

from ctxledger.adapters.web import views
from ctxledger.adapters.web.controls import MAX_FORM_BYTES, FormError

__all__ = ["agent_route", "agent_sort", "int_param", "is_number", "paging", "read_body"]


async def read_body(request: Request) -> bytes:
    length = request.headers.get("content-length")
    if length is not None and (not is_number(length) or int(length) > MAX_FORM_BYTES):
        raise FormError(400, f"the form is larger than {MAX_FORM_BYTES} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_FORM_BYTES:
            raise FormError(400, f"the form is larger than {MAX_FORM_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def is_number(raw: str) -> bool:
    """ASCII digits only: ``str.isdigit`` also accepts ``²`` and ``①``, which ``int`` refuses."""
    return raw.isascii() and raw.isdigit()


def int_param(request: Request, name: str, what: str = "a generation number") -> int | None:
    values = request.query_params.getlist(name)
    if len(values) > 1:
        raise FormError(400, f"{name} is given {len(values)} times")
    raw = values[0] if values else None
    if raw is None or raw == "":
        return None
    if not is_number(raw) or len(raw) > 9:
        raise FormError(400, f"{name} must be {what}, not {raw[:20]!r}")
    return int(raw)


def paging(request: Request) -> tuple[int, int]:
    """``?page=N&per=M``: page ≥ 1, 1 ≤ per ≤ ``views.MAX_PER``; anything else is a 400."""
    page = int_param(request, "page", "a page number (1, 2, …)")
    per = int_param(request, "per", f"a page size (1–{views.MAX_PER})")
    if page is not None and page < 1:
        raise FormError(400, "page must be at least 1")
    if per is not None and not 1 <= per <= views.MAX_PER:
        raise FormError(400, f"per must be between 1 and {views.MAX_PER}, not {per}")
    return page or 1, per or views.DEFAULT_PER


def agent_sort(request: Request) -> tuple[str, bool]:
    """``?sort=KEY&dir=asc|desc`` of the agents list (as the generation page's); anything else
    is a 400."""
    sort = request.query_params.get("sort", "agent")
    order = request.query_params.get("dir", "asc")
    if sort not in views.AGENT_SORT_KEYS:
        keys = ", ".join(views.AGENT_SORT_KEYS)
        raise FormError(400, f"sort must be one of {keys}, not {sort[:40]!r}")
    if order not in ("asc", "desc"):
        raise FormError(400, f"dir must be asc or desc, not {order[:40]!r}")
    return sort, order == "desc"


def agent_route(scope: Any) -> tuple[str, list[str]]:
    """The agent id and the path segments after it, from the request's raw (still
    percent-encoded) path, so an id holding ``/``, ``%`` or any character round-trips:
    links encode it as one segment (``quote(id, safe="")``) and only the raw path keeps
    an encoded ``/`` apart from a separator. A path that does not decode is a 404."""
    raw = scope.get("raw_path")
    path = raw.decode("latin-1") if raw else quote(scope["path"])
    root = quote(scope.get("root_path", ""))
    if root and path.startswith(root):
        path = path[len(root) :]
    segments = path.split("/")
    if len(segments) < 3 or segments[:2] != ["", "agents"] or not segments[2]:
        raise HTTPException(404, "no such page")
    try:
        decoded = [unquote(s, encoding="utf-8", errors="strict") for s in segments[2:]]
    except UnicodeDecodeError:
        raise HTTPException(404, "the path is not valid UTF-8 once decoded") from None
    return decoded[0], decoded[1:]
