"""The web inspector: a Starlette app over one ledger URL, server-rendered, without scripts."""

from __future__ import annotations

import contextlib
import importlib.resources
import itertools
import os
import secrets
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, unquote, urlencode, urlsplit

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.controls import apply_control
from ctxledger.adapters.engine import ContextEngine
from ctxledger.adapters.ledger import LedgerUnavailableError, open_ledger
from ctxledger.adapters.memory_catalog import MemoryCatalog
from ctxledger.adapters.project_memory import ProjectMemory
from ctxledger.adapters.projection_runner import ProjectionRunner
from ctxledger.adapters.tokens import counter_named, default_counter
from ctxledger.adapters.web import views, why
from ctxledger.adapters.web.access import Access, AccessGuard, actor_of
from ctxledger.adapters.web.charts import fmt_number, layer_colour, source_colour
from ctxledger.adapters.web.controls import (
    MAX_FORM_BYTES,
    ControlForm,
    FormError,
    check_item,
    check_origin,
    check_token,
    control_of,
    parse_control,
    parse_form,
    parse_memory_control,
)
from ctxledger.adapters.web.headers import SecurityHeaders
from ctxledger.domain import events as ev
from ctxledger.domain.errors import (
    ConflictError,
    CtxLedgerError,
    InvalidInputError,
    MemoryNotFoundError,
    RefreshExhaustedError,
    UnknownAgentError,
    UnknownGenerationError,
)
from ctxledger.domain.ports import TokenCounter
from ctxledger.projections.build_trace import SCORE_PARTS, BuildTrace, trace_builds
from ctxledger.projections.catalog import ReadModels

__all__ = ["create_app", "display_url"]

_T = TypeVar("_T")
_TRACED_KEPT = 16
"""Traced builds kept by the server (per agent, page kind and log position)."""

_TITLES = {
    400: "Bad request",
    401: "Access token required",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    421: "Misdirected request",
    500: "Server error",
    503: "Ledger unavailable",
}


def display_url(url: str) -> str:
    """A store URL fit to show on a page: any password replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@", 1)
    return url


class _InspectorApp(Starlette):
    """Starlette with the security headers outside everything, the 500 page included."""

    def build_middleware_stack(self) -> ASGIApp:
        return SecurityHeaders(super().build_middleware_stack())


class _Backend:
    """One ledger for the server's life. Read models are folded up to the end of the log on
    every request (so pages follow other writers); controls go through a fresh engine."""

    def __init__(self, store_url: str, catalog: Path | None) -> None:
        self.ledger = open_ledger(store_url)
        try:
            self._runner = ProjectionRunner(self.ledger)
        except BaseException:
            self.ledger.close()
            raise
        self._catalog = catalog
        self._read_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._counter: TokenCounter | None = None
        self._traced: dict[tuple[str, str, int], Any] = {}
        self._traced_lock = threading.Lock()

    def _remember(self, key: tuple[str, str, int], make: Callable[[], _T]) -> _T:
        """*make()* kept by (agent, what, log position): the log is the only state, so a
        result computed at a position stays right for that position."""
        with self._traced_lock:
            if key in self._traced:
                found: _T = self._traced[key]
                return found
        value = make()
        with self._traced_lock:
            while len(self._traced) >= _TRACED_KEPT:
                self._traced.pop(next(iter(self._traced)))
            self._traced[key] = value
        return value

    def _trace(
        self,
        agent_id: str,
        position: int,
        keep_view: Callable[[ev.ContextBuildingStarted], bool] | None = None,
        until: int | None = None,
    ) -> list[BuildTrace]:
        with self._read_lock:
            records = itertools.takewhile(lambda r: r.position <= position, self.ledger.read_all())
            return trace_builds(
                ((r.position, r.event) for r in records),
                agent_id,
                keep_view=keep_view,
                until=until,
            )

    def generation_why(self, agent_id: str, number: int, position: int) -> why.GenerationWhy:
        """The builds of generation *number* with their planner inputs, traced once per log
        position (a rebuild's Started is in the generation before)."""

        def make() -> why.GenerationWhy:
            traces = self._trace(
                agent_id, position, keep_view=lambda s: s.generation in (number - 1, number)
            )
            return why.GenerationWhy(
                [t for t in traces if t.built.generation == number and t.kind != "decision point"]
            )

        return self._remember((agent_id, f"generation {number}", position), make)

    def builds(self, agent_id: str, position: int) -> list[BuildTrace]:
        """Every build of the agent, without planner inputs."""
        return self._remember(
            (agent_id, "builds", position), lambda: self._trace(agent_id, position)
        )

    def build_traces(self, agent_id: str, pack_id: str, position: int) -> list[BuildTrace]:
        """Every build of the agent up to *pack_id*'s, with the planner inputs of that build
        and of the one before it."""

        def make() -> list[BuildTrace]:
            light = self.builds(agent_id, position)
            at = next((k for k, t in enumerate(light) if t.built.pack_id == pack_id), None)
            if at is None:
                raise UnknownAgentError(f"agent {agent_id[:80]!r} has no build {pack_id[:80]!r}")
            wanted = {t.built.pack_id for t in light[max(0, at - 3) : at + 1]}
            return self._trace(
                agent_id,
                position,
                keep_view=lambda s: s.pack_id in wanted,
                until=light[at].position,
            )

        return self._remember((agent_id, f"build {pack_id}", position), make)

    def states(self) -> tuple[ReadModels, int]:
        """A consistent snapshot of every read model and the log position it reflects."""
        with self._read_lock:
            self._runner.catch_up()
            return self._runner.models, self._runner.position

    def _engine(self, memory: ProjectMemory | None) -> ContextEngine:
        if self._counter is None:
            self._counter = default_counter()
        return open_engine(self.ledger, counter=self._counter, memory=memory)

    @contextlib.contextmanager
    def _memory(self) -> Iterator[ProjectMemory]:
        """The project memory over the configured catalog, open for one control only."""
        if self._catalog is None:
            raise FormError(400, "project memory needs a catalog: start with --catalog PATH")
        if not self._catalog.is_file():
            raise FormError(400, f"no catalog file at {self._catalog}")
        catalog = MemoryCatalog.open(self._catalog)
        try:
            yield ProjectMemory(catalog)
        finally:
            catalog.close()

    def control(self, agent_id: str, form: ControlForm, actor: str) -> int | None:
        """Check the control against the read models, then append through the engine."""
        needs_memory = form.action == "promote"
        with (
            self._write_lock,
            self._memory() if needs_memory else contextlib.nullcontext() as memory,
        ):
            engine = self._engine(memory)
            engine.agent(agent_id)
            check_item(engine.pool(agent_id), form)
            return apply_control(engine, control_of(agent_id, form, actor)).generation

    def memory_control(self, form: ControlForm, actor: str) -> None:
        """Verify one memory entry through the engine (catalog and MemoryVerified event)."""
        with self._write_lock, self._memory() as memory:
            self._engine(memory).verify_memory(form.memory_id, by=actor)

    def close(self) -> None:
        self.ledger.close()


def _agent_url(agent_id: str) -> str:
    return "/agents/" + quote(agent_id, safe="")


def _generation_url(agent_id: str, number: int) -> str:
    return f"{_agent_url(agent_id)}/generations/{int(number)}"


def _diff_url(agent_id: str, a: int, b: int) -> str:
    return f"{_agent_url(agent_id)}/diff?" + urlencode({"from": int(a), "to": int(b)})


def _item_url(agent_id: str, item_id: str) -> str:
    return f"{_agent_url(agent_id)}/items/" + quote(item_id, safe="")


def _page_url(base: str, page: int, per: int, **extra: int | str) -> str:
    """*base* (a path) with the pager's query: ``page`` and, when not the default, ``per``
    (after *extra*, e.g. the sort and filters of an item table)."""
    query: dict[str, int | str] = {**extra, "page": int(page)}
    if per != views.DEFAULT_PER:
        query["per"] = int(per)
    return base + "?" + urlencode(query)


def _query_url(base: str, params: dict[str, str]) -> str:
    """*base* with *params* (none: *base* itself)."""
    return base + "?" + urlencode(params) if params else base


def _build_url(agent_id: str, pack_id: str) -> str:
    return f"{_agent_url(agent_id)}/builds/" + quote(pack_id, safe="")


def _control_url(agent_id: str) -> str:
    return f"{_agent_url(agent_id)}/control"


def _fmt_time(value: datetime | None) -> str:
    return value.isoformat(timespec="seconds") if value is not None else "—"


def _short_path(value: str) -> str:
    """The last component of a path (``…/name``); pages put the full path in a title."""
    parts = [p for p in value.replace("\\", "/").split("/") if p]
    return value if len(parts) <= 1 else "…/" + parts[-1]


def _status_of(exc: CtxLedgerError) -> int:
    if isinstance(exc, UnknownAgentError | UnknownGenerationError | MemoryNotFoundError):
        return 404
    if isinstance(exc, InvalidInputError):
        return 400
    if isinstance(exc, ConflictError | RefreshExhaustedError):
        return 409
    if isinstance(exc, LedgerUnavailableError):
        return 503
    return 500


def _environment(
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
        agent_url=_agent_url,
        generation_url=_generation_url,
        diff_url=_diff_url,
        item_url=_item_url,
        page_url=_page_url,
        query_url=_query_url,
        build_url=_build_url,
        score_parts=SCORE_PARTS,
        control_url=_control_url,
        fmt_time=_fmt_time,
        short_path=_short_path,
        num=fmt_number,
        layer_colour=layer_colour,
        source_colour=source_colour,
    )
    return env


async def _read_body(request: Request) -> bytes:
    length = request.headers.get("content-length")
    if length is not None and (not _is_number(length) or int(length) > MAX_FORM_BYTES):
        raise FormError(400, f"the form is larger than {MAX_FORM_BYTES} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_FORM_BYTES:
            raise FormError(400, f"the form is larger than {MAX_FORM_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _is_number(raw: str) -> bool:
    """ASCII digits only: ``str.isdigit`` also accepts ``²`` and ``①``, which ``int`` refuses."""
    return raw.isascii() and raw.isdigit()


def _int_param(request: Request, name: str, what: str = "a generation number") -> int | None:
    values = request.query_params.getlist(name)
    if len(values) > 1:
        raise FormError(400, f"{name} is given {len(values)} times")
    raw = values[0] if values else None
    if raw is None or raw == "":
        return None
    if not _is_number(raw) or len(raw) > 9:
        raise FormError(400, f"{name} must be {what}, not {raw[:20]!r}")
    return int(raw)


def _paging(request: Request) -> tuple[int, int]:
    """``?page=N&per=M``: page ≥ 1, 1 ≤ per ≤ ``views.MAX_PER``; anything else is a 400."""
    page = _int_param(request, "page", "a page number (1, 2, …)")
    per = _int_param(request, "per", f"a page size (1–{views.MAX_PER})")
    if page is not None and page < 1:
        raise FormError(400, "page must be at least 1")
    if per is not None and not 1 <= per <= views.MAX_PER:
        raise FormError(400, f"per must be between 1 and {views.MAX_PER}, not {per}")
    return page or 1, per or views.DEFAULT_PER


def _agent_sort(request: Request) -> tuple[str, bool]:
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


def _agent_route(scope: Any) -> tuple[str, list[str]]:
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


def create_app(
    store_url: str,
    *,
    catalog: str | os.PathLike[str] | None = None,
    read_only: bool = False,
    token: str | None = None,
    access: Access | None = None,
) -> Starlette:
    """The inspector app over the ledger at *store_url*.

    ``token`` is the per-server secret every control form carries (random when not given);
    ``read_only`` hides the controls and refuses every POST with 403; ``access`` (from
    ``access_for_bind``: ``ctxledger serve`` always passes one) refuses a Host the bind does
    not answer to, which closes DNS rebinding, and requests without the access token. The
    ledger opens now, so a bad URL fails here."""
    if token is not None and len(token) < 16:
        raise InvalidInputError("the CSRF token must be at least 16 characters")
    secret = token or secrets.token_urlsafe(32)
    catalog_path = Path(catalog) if catalog is not None else None
    css = (
        importlib.resources.files("ctxledger.adapters.web")
        .joinpath("static/inspector.css")
        .read_bytes()
    )
    env = _environment(
        token=secret,
        read_only=read_only,
        store_label=display_url(store_url),
        catalog=catalog_path,
    )
    templates = Jinja2Templates(env=env)
    backend = _Backend(store_url, catalog_path)

    def render(
        request: Request,
        name: str,
        context: dict[str, Any],
        status: int = 200,
        headers: dict[str, str] | None = None,
    ) -> Response:
        return templates.TemplateResponse(
            request, name, context, status_code=status, headers=headers
        )

    def error_page(
        request: Request, status: int, reason: str, headers: dict[str, str] | None = None
    ) -> Response:
        context = {
            "page": "error",
            "status": status,
            "title": _TITLES.get(status, "Error"),
            "reason": reason,
            "position": None,
        }
        return render(request, "error.html", context, status, headers)

    def index(request: Request) -> Response:
        sort, descending = _agent_sort(request)
        states, position = backend.states()
        ctx = views.agents_page(states, sort=sort, descending=descending)
        return render(request, "index.html", {**ctx, "page": "agents", "position": position})

    def agent(request: Request, agent_id: str) -> Response:
        page, per = _paging(request)
        states, position = backend.states()
        ctx = views.agent_page(states, agent_id, page=page, per=per)
        return render(request, "agent.html", {**ctx, "page": "agents", "position": position})

    def generation(request: Request, agent_id: str, number: int) -> Response:
        page, per = _paging(request)
        query = why.ItemQuery.parse(
            {k: request.query_params.getlist(k) for k in request.query_params}
        )
        states, position = backend.states()
        views.generation_of(states, agent_id, number)  # a 404 before tracing
        ctx = views.generation_page(
            states,
            agent_id,
            number,
            page=page,
            per=per,
            query=query,
            why=backend.generation_why(agent_id, number, position),
        )
        here = _generation_url(agent_id, number)
        if page != 1 or per != views.DEFAULT_PER:
            here = _page_url(here, page, per, **query.params())
        elif query.params():
            here = _query_url(here, query.params())
        return render(
            request,
            "generation.html",
            {**ctx, "page": "agents", "position": position, "here": here},
        )

    def build(request: Request, agent_id: str, pack_id: str) -> Response:
        states, position = backend.states()
        traces = backend.build_traces(agent_id, pack_id, position)  # none: a 404
        ctx = why.prompt_page(states, agent_id, traces, pack_id, counter_named)
        return render(request, "build.html", {**ctx, "page": "agents", "position": position})

    def item(request: Request, agent_id: str, item_id: str) -> Response:
        states, position = backend.states()
        ctx = views.item_page(states, agent_id, item_id)
        return render(request, "item.html", {**ctx, "page": "agents", "position": position})

    def diff(request: Request, agent_id: str) -> Response:
        a, b = _int_param(request, "from"), _int_param(request, "to")
        page, per = _paging(request)
        states, position = backend.states()
        defaults = views.agent_page(states, agent_id)
        ctx = views.diff_page(
            states,
            agent_id,
            defaults["diff_from"] if a is None else a,
            defaults["diff_to"] if b is None else b,
            page=page,
            per=per,
        )
        return render(request, "diff.html", {**ctx, "page": "agents", "position": position})

    def cache(request: Request) -> Response:
        page, per = _paging(request)
        states, position = backend.states()
        ctx = views.cache_page(states, page=page, per=per)
        return render(request, "cache.html", {**ctx, "page": "cache", "position": position})

    def memory(request: Request) -> Response:
        states, position = backend.states()
        ctx = views.memory_page(states, catalog_path)
        return render(request, "memory.html", {**ctx, "page": "memory", "position": position})

    def stylesheet(_request: Request) -> Response:
        return Response(css, media_type="text/css", headers={"cache-control": "no-cache"})

    async def checked_form(request: Request) -> dict[str, str]:
        """Read-only, origin, body and token checks shared by every POST (in that order)."""
        if read_only:
            raise FormError(403, "the inspector runs read-only: manual controls are disabled")
        check_origin(
            request.headers.get("origin"),
            request.headers.get("sec-fetch-site"),
            f"{request.url.scheme}://{request.url.netloc}",
        )
        fields = parse_form(await _read_body(request), request.headers.get("content-type", ""))
        check_token(fields, secret)
        return fields

    async def control(request: Request, agent_id: str) -> Response:
        form = parse_control(await checked_form(request))
        started = await run_in_threadpool(backend.control, agent_id, form, actor_of(request.scope))
        if form.next and started is None:
            target = form.next
        elif started is not None:
            target = _generation_url(agent_id, started)
        else:
            target = _agent_url(agent_id)
        return RedirectResponse(target, status_code=303)

    async def agents(request: Request) -> Response:
        """Every ``/agents/{id}/…`` route, dispatched on the raw path (see ``_agent_route``)."""
        agent_id, rest = _agent_route(request.scope)
        method = request.method
        if rest == ["control"]:
            if method != "POST":
                raise HTTPException(405, "use POST", headers={"allow": "POST"})
            return await control(request, agent_id)
        if method not in ("GET", "HEAD"):
            raise HTTPException(405, "use GET", headers={"allow": "GET, HEAD"})
        match rest:
            case []:
                return await run_in_threadpool(agent, request, agent_id)
            case ["generations", number] if _is_number(number) and len(number) <= 9:
                return await run_in_threadpool(generation, request, agent_id, int(number))
            case ["diff"]:
                return await run_in_threadpool(diff, request, agent_id)
            case ["builds", pack_id] if pack_id:
                return await run_in_threadpool(build, request, agent_id, pack_id)
            case ["items", item_id] if item_id:
                return await run_in_threadpool(item, request, agent_id, item_id)
            case _:
                raise HTTPException(404, "no such page")

    async def memory_control(request: Request) -> Response:
        fields = await checked_form(request)
        form = parse_memory_control(fields)
        await run_in_threadpool(backend.memory_control, form, actor_of(request.scope))
        return RedirectResponse("/memory", status_code=303)

    async def on_http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        headers = dict(exc.headers) if exc.headers else None
        return error_page(request, exc.status_code, exc.detail, headers)

    async def on_form_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, FormError)
        return error_page(request, exc.status, exc.reason)

    async def on_ledger_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, CtxLedgerError)
        return error_page(request, _status_of(exc), str(exc)[:500])

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            backend.close()

    def refuse(
        request: Request, status: int, reason: str, headers: dict[str, str] | None
    ) -> Response:
        """A refusal before authentication: the error page without the store's name."""
        context = {
            "page": "refused",
            "status": status,
            "title": _TITLES.get(status, "Error"),
            "reason": reason,
            "position": None,
        }
        return render(request, "error.html", context, status, headers)

    async def on_unexpected(request: Request, _exc: Exception) -> Response:
        return error_page(request, 500, "an unexpected error; see the server's log")

    middleware = []
    if access is not None:
        middleware.append(Middleware(AccessGuard, access=access, refuse=refuse))
    app = _InspectorApp(
        routes=[
            Route("/", index, methods=["GET"]),
            Route("/cache", cache, methods=["GET"]),
            Route("/memory", memory, methods=["GET"]),
            Route("/memory/control", memory_control, methods=["POST"]),
            Route("/static/inspector.css", stylesheet, methods=["GET"]),
            Route("/agents/{rest:path}", agents, methods=["GET", "POST"]),
        ],
        middleware=middleware,
        exception_handlers={
            HTTPException: on_http_error,
            FormError: on_form_error,
            CtxLedgerError: on_ledger_error,
            Exception: on_unexpected,
        },
        lifespan=lifespan,
    )
    app.state.csrf_token = secret
    app.state.read_only = read_only
    return app
