"""The inspector's pages: one handler per route over the one backend, and the error pages."""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.templating import Jinja2Templates

from ctxledger.adapters.ledger import LedgerUnavailableError
from ctxledger.adapters.tokens import counter_named
from ctxledger.adapters.web import views, why
from ctxledger.adapters.web.access import actor_of
from ctxledger.adapters.web.backend import InspectorBackend
from ctxledger.adapters.web.controls import (
    FormError,
    check_origin,
    check_token,
    parse_control,
    parse_form,
    parse_memory_control,
)
from ctxledger.adapters.web.links import agent_url, generation_url, page_url, query_url
from ctxledger.adapters.web.memory_view import memory_page
from ctxledger.adapters.web.request_params import (
    agent_route,
    agent_sort,
    int_param,
    is_number,
    paging,
    read_body,
)
from ctxledger.domain.errors import (
    ConflictError,
    CtxLedgerError,
    InvalidInputError,
    MemoryNotFoundError,
    RefreshExhaustedError,
    UnknownAgentError,
    UnknownGenerationError,
)

__all__ = ["TITLES", "Pages", "status_of"]

TITLES = {
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


def status_of(exc: CtxLedgerError) -> int:
    if isinstance(exc, UnknownAgentError | UnknownGenerationError | MemoryNotFoundError):
        return 404
    if isinstance(exc, InvalidInputError):
        return 400
    if isinstance(exc, ConflictError | RefreshExhaustedError):
        return 409
    if isinstance(exc, LedgerUnavailableError):
        return 503
    return 500


class Pages:
    """Every route's handler: a page reads a consistent snapshot of the read models, a POST
    passes the shared form checks and appends through the backend."""

    def __init__(
        self,
        templates: Jinja2Templates,
        backend: InspectorBackend,
        *,
        secret: str,
        read_only: bool,
        catalog: Any,
        css: bytes,
    ) -> None:
        self.templates = templates
        self.backend = backend
        self.secret = secret
        self.read_only = read_only
        self.catalog = catalog
        self.css = css

    def render(
        self,
        request: Request,
        name: str,
        context: dict[str, Any],
        status: int = 200,
        headers: dict[str, str] | None = None,
    ) -> Response:
        return self.templates.TemplateResponse(
            request, name, context, status_code=status, headers=headers
        )

    def _page(self, request: Request, name: str, ctx: dict[str, Any], position: int) -> Response:
        return self.render(request, name, {**ctx, "page": "agents", "position": position})

    def error_page(
        self, request: Request, status: int, reason: str, headers: dict[str, str] | None = None
    ) -> Response:
        return self._error(request, "error", status, reason, headers)

    def refuse(
        self, request: Request, status: int, reason: str, headers: dict[str, str] | None
    ) -> Response:
        """A refusal before authentication: the error page without the store's name."""
        return self._error(request, "refused", status, reason, headers)

    def _error(
        self,
        request: Request,
        page: str,
        status: int,
        reason: str,
        headers: dict[str, str] | None,
    ) -> Response:
        context = {
            "page": page,
            "status": status,
            "title": TITLES.get(status, "Error"),
            "reason": reason,
            "position": None,
        }
        return self.render(request, "error.html", context, status, headers)

    def index(self, request: Request) -> Response:
        sort, descending = agent_sort(request)
        states, position = self.backend.states()
        ctx = views.agents_page(states, sort=sort, descending=descending)
        return self.render(request, "index.html", {**ctx, "page": "agents", "position": position})

    def agent(self, request: Request, agent_id: str) -> Response:
        page, per = paging(request)
        states, position = self.backend.states()
        ctx = views.agent_page(states, agent_id, page=page, per=per)
        return self._page(request, "agent.html", ctx, position)

    def generation(self, request: Request, agent_id: str, number: int) -> Response:
        page, per = paging(request)
        query = why.ItemQuery.parse(
            {k: request.query_params.getlist(k) for k in request.query_params}
        )
        states, position = self.backend.states()
        views.generation_of(states, agent_id, number)  # a 404 before tracing
        ctx = views.generation_page(
            states,
            agent_id,
            number,
            page=page,
            per=per,
            query=query,
            why=self.backend.generation_why(agent_id, number, position),
        )
        here = generation_url(agent_id, number)
        if page != 1 or per != views.DEFAULT_PER:
            here = page_url(here, page, per, **query.params())
        elif query.params():
            here = query_url(here, query.params())
        return self._page(request, "generation.html", {**ctx, "here": here}, position)

    def build(self, request: Request, agent_id: str, pack_id: str) -> Response:
        states, position = self.backend.states()
        traces = self.backend.build_traces(agent_id, pack_id, position)  # none: a 404
        ctx = why.prompt_page(states, agent_id, traces, pack_id, counter_named)
        return self._page(request, "build.html", ctx, position)

    def item(self, request: Request, agent_id: str, item_id: str) -> Response:
        states, position = self.backend.states()
        ctx = views.item_page(states, agent_id, item_id)
        return self._page(request, "item.html", ctx, position)

    def diff(self, request: Request, agent_id: str) -> Response:
        a, b = int_param(request, "from"), int_param(request, "to")
        page, per = paging(request)
        states, position = self.backend.states()
        defaults = views.agent_page(states, agent_id)
        ctx = views.diff_page(
            states,
            agent_id,
            defaults["diff_from"] if a is None else a,
            defaults["diff_to"] if b is None else b,
            page=page,
            per=per,
        )
        return self._page(request, "diff.html", ctx, position)

    def cache(self, request: Request) -> Response:
        page, per = paging(request)
        states, position = self.backend.states()
        ctx = views.cache_page(states, page=page, per=per)
        return self.render(request, "cache.html", {**ctx, "page": "cache", "position": position})

    def memory(self, request: Request) -> Response:
        states, position = self.backend.states()
        ctx = memory_page(states, self.catalog)
        return self.render(request, "memory.html", {**ctx, "page": "memory", "position": position})

    def stylesheet(self, _request: Request) -> Response:
        return Response(self.css, media_type="text/css", headers={"cache-control": "no-cache"})

    async def checked_form(self, request: Request) -> dict[str, str]:
        """Read-only, origin, body and token checks shared by every POST (in that order)."""
        if self.read_only:
            raise FormError(403, "the inspector runs read-only: manual controls are disabled")
        check_origin(
            request.headers.get("origin"),
            request.headers.get("sec-fetch-site"),
            f"{request.url.scheme}://{request.url.netloc}",
        )
        fields = parse_form(await read_body(request), request.headers.get("content-type", ""))
        check_token(fields, self.secret)
        return fields

    async def control(self, request: Request, agent_id: str) -> Response:
        form = parse_control(await self.checked_form(request))
        started = await run_in_threadpool(
            self.backend.control, agent_id, form, actor_of(request.scope)
        )
        if form.next and started is None:
            target = form.next
        elif started is not None:
            target = generation_url(agent_id, started)
        else:
            target = agent_url(agent_id)
        return RedirectResponse(target, status_code=303)

    async def agents(self, request: Request) -> Response:
        """Every ``/agents/{id}/…`` route, dispatched on the raw path (see ``agent_route``)."""
        agent_id, rest = agent_route(request.scope)
        method = request.method
        if rest == ["control"]:
            if method != "POST":
                raise HTTPException(405, "use POST", headers={"allow": "POST"})
            return await self.control(request, agent_id)
        if method not in ("GET", "HEAD"):
            raise HTTPException(405, "use GET", headers={"allow": "GET, HEAD"})
        match rest:
            case []:
                return await run_in_threadpool(self.agent, request, agent_id)
            case ["generations", number] if is_number(number) and len(number) <= 9:
                return await run_in_threadpool(self.generation, request, agent_id, int(number))
            case ["diff"]:
                return await run_in_threadpool(self.diff, request, agent_id)
            case ["builds", pack_id] if pack_id:
                return await run_in_threadpool(self.build, request, agent_id, pack_id)
            case ["items", item_id] if item_id:
                return await run_in_threadpool(self.item, request, agent_id, item_id)
            case _:
                raise HTTPException(404, "no such page")

    async def memory_control(self, request: Request) -> Response:
        form = parse_memory_control(await self.checked_form(request))
        await run_in_threadpool(self.backend.memory_control, form, actor_of(request.scope))
        return RedirectResponse("/memory", status_code=303)

    async def on_http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        headers = dict(exc.headers) if exc.headers else None
        return self.error_page(request, exc.status_code, exc.detail, headers)

    async def on_form_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, FormError)
        return self.error_page(request, exc.status, exc.reason)

    async def on_ledger_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, CtxLedgerError)
        return self.error_page(request, status_of(exc), str(exc)[:500])

    async def on_unexpected(self, request: Request, _exc: Exception) -> Response:
        return self.error_page(request, 500, "an unexpected error; see the server's log")
