"""The ``/v1/`` service of ``ctxledger api``, independent of its transport: ``ApiService.handle``
takes a method, a path, the query, the raw body and an ``Idempotency-Key`` and returns the
status and the JSON body. The HTTP app (``adapters.api.app``) and the JSON-lines mode
(``adapters.api.stdio``) both call it, so both answer every request the same way.

Every body is decoded with its type in ``adapters.api.types`` (unknown fields refused) and every
answer encoded from one; errors are ``{"error": {"type", "message", "field"}}`` with 4xx for the
caller's mistakes (``errors.error_response``) and 5xx only for ours."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from ctxledger.adapters.api import types as t
from ctxledger.adapters.api.errors import ApiError, error_response
from ctxledger.adapters.api.idempotency import IdempotencyStore, fingerprint
from ctxledger.adapters.engine import BuildResult, ContextEngine
from ctxledger.domain.model import AgentIdentity
from ctxledger.projections.inspector import diff_generations, inspect_agent

__all__ = ["ROUTES", "ApiService", "Route", "build_out"]

Handler = Callable[["ApiService", str, Any, Mapping[str, str]], msgspec.Struct]


@dataclass(frozen=True)
class Route:
    """One endpoint: its method, path template, body type (None: no body) and answer type."""

    method: str
    path: str
    summary: str
    body: type[msgspec.Struct] | None
    answer: type[msgspec.Struct]
    handler: Handler
    status: int = 200

    @property
    def pattern(self) -> re.Pattern[str]:
        return re.compile("^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", self.path) + "$")


def build_out(engine: ContextEngine, result: BuildResult, body: t.BuildIn | None) -> t.BuildOut:
    """A build as the API answers it: the prompt parts, a decisions summary and, when *body*
    names a provider and a model, the rendered provider request."""
    counts = {"included": 0, "dropped": 0, "compressed": 0, "clipped": 0}
    for d in result.pack.decisions:
        counts[d.action] += 1
    request = None
    if body is not None and body.provider is not None:
        render: Any = engine.render  # the provider is checked by the body's type
        rendered = render(
            result,
            body.provider,
            body.model,
            max_tokens=body.max_tokens,
            messages=body.messages,
            tools=body.tools,
            prompt_cache_key=body.prompt_cache_key,
            cache_ttl=body.cache_ttl,
        )
        request = msgspec.to_builtins(rendered)
    return t.BuildOut(
        pack_id=result.pack.id,
        kind=result.kind,
        generation=result.generation,
        static_prefix=result.prompt.static,
        dynamic_tail=result.prompt.dynamic,
        prefix_hash=result.prompt.prefix_hash,
        budget_used=result.pack.budget_used,
        budget_limit=result.pack.budget_limit,
        decisions=t.DecisionsSummary(**counts),
        message=result.message,
        request=request,
    )


def _register(svc: ApiService, _agent: str, body: t.AgentIn, _q: Mapping[str, str]) -> t.AgentOut:
    engine = svc.engine
    identity = AgentIdentity(
        agent_id=body.agent_id,
        role=body.role,
        task=body.task,
        parent=body.parent,
        scope=tuple(body.scope),
        model=body.model,
        workspace=body.workspace,
        budget=body.budget,
        session_id=body.session_id,
    )
    with engine.lock:
        engine.register_agent(identity)
        wanted = {
            k: getattr(body, k)
            for k in ("strategy", "recall", "watermark", "latest_step", "secrets")
            if getattr(body, k) is not None
        }
        settings = engine.configure(body.agent_id, **wanted) if wanted else None
        ag = engine.agent(body.agent_id)
        settings = settings or ag.settings
        return t.AgentOut(
            agent_id=body.agent_id,
            session_id=ag.agent.session_id,
            generation=ag.current.number,
            strategy=settings.strategy,
            budget=settings.budget or ag.agent.budget,
        )


def _items(svc: ApiService, agent: str, body: t.ItemsIn, _q: Mapping[str, str]) -> t.ItemsOut:
    if (body.item is None) == (body.items is None):
        raise ApiError(422, "invalid_body", "give exactly one of item or items", field="item")
    given = [body.item] if body.item is not None else list(body.items or [])
    if not given:
        raise ApiError(422, "invalid_body", "items is empty", field="items")
    engine = svc.engine
    with engine.lock:
        engine.agent(agent)
        made = [
            engine.make_item(
                agent,
                i.content,
                layer=i.layer,  # type: ignore[arg-type]  # member() checks it
                source=i.source,  # type: ignore[arg-type]
                item_id=i.id,
                task=i.task,
                stage=i.stage,
                phase=i.phase,
                files=tuple(i.files),
                symbols=tuple(i.symbols),
                pinned=i.pinned,
                failure=i.failure,
                tool_signature=i.tool_signature,
                group=i.group,
                confidence=i.confidence,
                relevance=i.relevance,
            )
            for i in given
        ]
        recorded = engine.record_many(agent, made)
    return t.ItemsOut(
        items=[
            t.ItemOut(id=i.id, token_count=i.token_count, redacted=list(i.redacted))
            for i in recorded
        ]
    )


def _check_render(body: t.BuildIn) -> None:
    """Refuse render arguments that cannot go together before anything is built."""
    if body.provider is not None and not body.model:
        raise ApiError(422, "invalid_body", "provider needs a model", field="model")
    if body.cache_ttl is not None and body.provider != "anthropic":
        raise ApiError(422, "invalid_body", "cache_ttl is Anthropic's", field="cache_ttl")
    if body.prompt_cache_key is not None and body.provider == "anthropic":
        raise ApiError(
            422, "invalid_body", "prompt_cache_key is OpenAI's", field="prompt_cache_key"
        )


def _build(svc: ApiService, agent: str, body: t.BuildIn, _q: Mapping[str, str]) -> t.BuildOut:
    _check_render(body)
    engine = svc.engine
    with engine.lock:
        result = engine.build(
            agent,
            budget=body.budget,
            strategy=body.strategy,
            task=body.task,
            phase=body.phase,
            files=body.files,
            symbols=body.symbols,
            keywords=body.keywords,
            failures=body.failures,
        )
        return build_out(engine, result, body)


def _usage(svc: ApiService, agent: str, body: t.UsageIn, _q: Mapping[str, str]) -> t.UsageOut:
    e = svc.engine.report_usage(agent, body.usage)
    return t.UsageOut(
        provider=e.provider,
        input_tokens=e.input_tokens,
        cache_read_tokens=e.cache_read_tokens,
        cache_write_tokens=e.cache_write_tokens,
        output_tokens=e.output_tokens,
        expected_cached_tokens=e.expected_cached_tokens,
    )


def _turn_error(
    svc: ApiService, agent: str, body: t.TurnErrorIn, _q: Mapping[str, str]
) -> t.TurnErrorOut:
    if body.error is None and not body.message:
        raise ApiError(422, "invalid_body", "give the provider's error or message", field="error")
    engine = svc.engine
    with engine.lock:
        error: object = body.error if body.error is not None else body.message
        outcome = engine.on_turn_error(agent, error, provider=body.provider)
        built = build_out(engine, outcome.result, None) if outcome.result is not None else None
    return t.TurnErrorOut(
        error=outcome.error, refreshed=outcome.refreshed, message=outcome.message, build=built
    )


def _control(svc: ApiService, agent: str, body: t.ControlIn, _q: Mapping[str, str]) -> t.ControlOut:
    engine = svc.engine
    with engine.lock:
        engine.agent(agent)
        if body.action == "pin":
            engine.pin(agent, body.item_id, by=body.by)
        elif body.action == "unpin":
            engine.unpin(agent, body.item_id, by=body.by)
        elif body.action == "remove":
            engine.remove(agent, body.item_id, reason=body.reason)
        else:
            engine.verify_finding(agent, body.item_id, by=body.by, evidence=body.evidence)
    return t.ControlOut(action=body.action, item_id=body.item_id)


def _int_query(query: Mapping[str, str], name: str, default: int | None) -> int | None:
    raw = query.get(name)
    if raw is None or raw == "":
        if default is None and name in ("from", "to"):
            raise ApiError(422, "invalid_query", f"?{name}= is required", field=name)
        return default
    try:
        return int(raw)
    except ValueError:
        raise ApiError(422, "invalid_query", f"?{name}= must be an integer", field=name) from None


def _inspect(svc: ApiService, agent: str, _b: None, query: Mapping[str, str]) -> t.InspectOut:
    engine = svc.engine
    with engine.lock:
        engine.agent(agent)
        return inspect_agent(engine.states, agent, _int_query(query, "generation", None))


def _generations(svc: ApiService, agent: str, _b: None, _q: Mapping[str, str]) -> t.GenerationsOut:
    engine = svc.engine
    with engine.lock:
        ag = engine.agent(agent)
        rows = [
            t.GenerationRow(
                number=g.number,
                kind=g.kind,
                trigger=g.trigger,
                reason=g.reason,
                strategy=g.strategy,
                budget=g.budget,
                tokens_used=g.tokens_used,
                overflow=g.overflow,
                builds=g.builds,
                included=len(g.included),
                dropped=len(g.dropped),
            )
            for g in ag.generations
        ]
    return t.GenerationsOut(agent=agent, generations=rows)


def _diff(svc: ApiService, agent: str, _b: None, query: Mapping[str, str]) -> t.DiffOut:
    a, b = _int_query(query, "from", None), _int_query(query, "to", None)
    engine = svc.engine
    with engine.lock:
        engine.agent(agent)
        return diff_generations(engine.states, agent, a or 0, b or 0)


ROUTES: tuple[Route, ...] = (
    Route(
        "POST", "/v1/agents", "Register (and configure) an agent", t.AgentIn, t.AgentOut, _register
    ),
    Route(
        "POST",
        "/v1/agents/{agent_id}/items",
        "Record one item or a batch",
        t.ItemsIn,
        t.ItemsOut,
        _items,
    ),
    Route(
        "POST",
        "/v1/agents/{agent_id}/build",
        "Build the next pack (and render it)",
        t.BuildIn,
        t.BuildOut,
        _build,
    ),
    Route(
        "POST",
        "/v1/agents/{agent_id}/usage",
        "Report a call's usage",
        t.UsageIn,
        t.UsageOut,
        _usage,
    ),
    Route(
        "POST",
        "/v1/agents/{agent_id}/turn-errors",
        "Report a turn error (may refresh)",
        t.TurnErrorIn,
        t.TurnErrorOut,
        _turn_error,
    ),
    Route(
        "POST",
        "/v1/agents/{agent_id}/controls",
        "Pin, unpin, remove or verify an item",
        t.ControlIn,
        t.ControlOut,
        _control,
    ),
    Route(
        "GET",
        "/v1/agents/{agent_id}",
        "The Context view (?generation=)",
        None,
        t.InspectOut,
        _inspect,
    ),
    Route(
        "GET",
        "/v1/agents/{agent_id}/generations",
        "Every generation",
        None,
        t.GenerationsOut,
        _generations,
    ),
    Route(
        "GET",
        "/v1/agents/{agent_id}/diff",
        "Diff two generations (?from=&to=)",
        None,
        t.DiffOut,
        _diff,
    ),
)
_MATCHERS = [(r, r.pattern) for r in ROUTES]


class ApiService:
    """The API over one engine; *idempotency* keeps the answers of keyed POSTs."""

    def __init__(
        self, engine: ContextEngine, idempotency: IdempotencyStore, *, version: str = "0"
    ) -> None:
        self.engine = engine
        self.idempotency = idempotency
        self.version = version
        """ctxledger's version (the OpenAPI document's ``info.version``)."""

    def handle(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: bytes = b"",
        idempotency_key: str | None = None,
    ) -> tuple[int, bytes]:
        """``(status, JSON body)`` of one request (never raises)."""
        try:
            route, params = self._route(method, path)
            if method != "POST" or not idempotency_key:
                return self._run(route, params, query or {}, body)
            key_print = fingerprint(method, path, body)
            return self.idempotency.once(
                idempotency_key, key_print, lambda: self._run(route, params, query or {}, body)
            )
        except Exception as exc:  # every failure becomes an error body
            return error_response(exc)

    def _route(self, method: str, path: str) -> tuple[Route, dict[str, str]]:
        allowed = False
        for route, pattern in _MATCHERS:
            m = pattern.match(path)
            if m is None:
                continue
            if route.method == method:
                return route, m.groupdict()
            allowed = True
        if allowed:
            raise ApiError(405, "method_not_allowed", f"{method} is not allowed on {path[:200]}")
        raise ApiError(404, "not_found", f"no endpoint {path[:200]}")

    def _run(
        self, route: Route, params: dict[str, str], query: Mapping[str, str], raw: bytes
    ) -> tuple[int, bytes]:
        try:
            decoded = None
            if route.body is not None:
                decoded = msgspec.json.decode(raw or b"{}", type=route.body)
            with self.engine.lock:  # other processes may serve the same store: fold theirs
                self.engine.catch_up()
                answer = route.handler(self, params.get("agent_id", ""), decoded, query)
            return route.status, msgspec.json.encode(answer)
        except Exception as exc:
            return error_response(exc)
