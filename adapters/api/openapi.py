"""``/v1/openapi.json``: the OpenAPI 3.1 document of ``ctxledger api``, generated from the route
table (``service.ROUTES``) and the msgspec types of ``adapters.api.types``
(``msgspec.json.schema_components``), never written by hand."""

from __future__ import annotations

import functools
from typing import Any

import msgspec

from ctxledger.adapters.api.service import ROUTES, Route
from ctxledger.adapters.api.types import ErrorBody

__all__ = ["openapi_document"]

_REF = "#/components/schemas/{name}"
_QUERY = {"generation": "integer", "from": "integer", "to": "integer"}


def _error(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": _REF.format(name="ErrorBody")}}},
    }


def _operation(route: Route, answer: dict[str, Any], body: dict[str, Any] | None) -> dict[str, Any]:
    op: dict[str, Any] = {
        "summary": route.summary,
        "operationId": route.handler.__name__.strip("_"),
        "responses": {
            str(route.status): {
                "description": "OK",
                "content": {"application/json": {"schema": answer}},
            },
            "401": _error("missing or wrong bearer token"),
            "404": _error("unknown agent or endpoint"),
            "409": _error("conflict, or Idempotency-Key reused with another body"),
            "422": _error("bad body or input"),
            "503": _error("the store is unreachable"),
        },
    }
    params: list[dict[str, Any]] = []
    if "{agent_id}" in route.path:
        params.append(
            {"name": "agent_id", "in": "path", "required": True, "schema": {"type": "string"}}
        )
    for name in _QUERY if route.method == "GET" else ():
        if (name == "generation") == route.path.endswith("{agent_id}"):
            params.append(
                {
                    "name": name,
                    "in": "query",
                    "required": name != "generation",
                    "schema": {"type": "integer"},
                }
            )
    if body is not None:
        params.append(
            {
                "name": "Idempotency-Key",
                "in": "header",
                "required": False,
                "schema": {"type": "string"},
            }
        )
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    if params:
        op["parameters"] = params
    return op


@functools.cache
def openapi_document(version: str) -> dict[str, Any]:
    """The document for this build of ctxledger (*version*: ``info.version``)."""
    types: list[Any] = [ErrorBody]
    for r in ROUTES:
        types.append(r.answer)
        if r.body is not None:
            types.append(r.body)
    schemas, components = msgspec.json.schema_components(types, ref_template=_REF)
    it = iter(schemas)
    paths: dict[str, dict[str, Any]] = {}
    next(it)  # ErrorBody
    for r in ROUTES:
        answer = next(it)
        body = next(it) if r.body is not None else None
        paths.setdefault(r.path, {})[r.method.lower()] = _operation(r, answer, body)
    return {
        "openapi": "3.1.0",
        "info": {"title": "ctxledger api", "version": version},
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
        "paths": paths,
    }
