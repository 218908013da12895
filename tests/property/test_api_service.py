"""Invariants of the `/v1/` service (``adapters.api.service.ApiService``, in process over a real
in-memory ledger): whatever JSON a caller sends to whichever endpoint, the answer is JSON, never
a 5xx, and every error has the one shape ``{"error": {"type", "message", "field"}}``; a keyed
POST repeated with the same body answers the same bytes and appends nothing more."""

from __future__ import annotations

import json
from collections.abc import Iterator

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxledger.adapters.api.idempotency import IdempotencyStore
from ctxledger.adapters.api.service import ROUTES, ApiService
from ctxledger.adapters.bootstrap import open_engine

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)
FIELDS = st.sampled_from(
    [
        "agent_id",
        "role",
        "budget",
        "item",
        "items",
        "content",
        "layer",
        "source",
        "provider",
        "model",
        "usage",
        "error",
        "message",
        "action",
        "item_id",
        "strategy",
        "id",
        "files",
    ]
)
NEAR_ITEM = st.fixed_dictionaries(
    {"content": st.text(max_size=40)},
    optional={
        "layer": st.integers(-2, 7) | st.text(max_size=3),
        "source": st.sampled_from(["tool_log", "user_requirement", "nope", ""]),
        "id": st.text(max_size=10),
        "files": st.lists(st.text(max_size=8), max_size=3),
        "pinned": st.booleans(),
        "confidence": st.floats(allow_nan=False, allow_infinity=False),
    },
)
NEAR_VALID = (
    st.builds(lambda i: {"item": i}, NEAR_ITEM)
    | st.builds(lambda xs: {"items": xs}, st.lists(NEAR_ITEM, max_size=3))
    | st.fixed_dictionaries(
        {},
        optional={
            "budget": st.integers(-5, 5000),
            "strategy": st.text(max_size=8),
            "provider": st.sampled_from(["anthropic", "openai", "x"]),
            "model": st.text(max_size=8),
        },
    )
    | st.fixed_dictionaries(
        {
            "action": st.sampled_from(["pin", "unpin", "remove", "verify", "x"]),
            "item_id": st.text(max_size=8),
        }
    )
    | st.fixed_dictionaries(
        {
            "usage": st.dictionaries(
                st.sampled_from(
                    ["input_tokens", "output_tokens", "prompt_tokens", "cache_read_input_tokens"]
                ),
                st.integers(-3, 10**6) | st.text(max_size=3),
                max_size=3,
            )
        }
    )
    | st.fixed_dictionaries(
        {},
        optional={
            "message": st.text(max_size=40),
            "provider": st.text(max_size=8),
            "error": st.dictionaries(st.text(max_size=6), JSON, max_size=3),
        },
    )
)
BODY = NEAR_VALID | st.dictionaries(FIELDS, JSON, max_size=5) | JSON
TARGETS = st.sampled_from(
    [(r.method, r.path.replace("{agent_id}", "a")) for r in ROUTES]
    + [("POST", "/v1/agents/zz/items"), ("GET", "/v1/x"), ("DELETE", "/v1/agents/a")]
)


@pytest.fixture(scope="module")
def service() -> Iterator[ApiService]:
    engine = open_engine("memory://")
    svc = ApiService(engine, IdempotencyStore())
    status, _ = svc.handle(
        "POST", "/v1/agents", body=b'{"agent_id": "a", "role": "coder", "budget": 3000}'
    )
    assert status == 200
    yield svc
    engine.close()


def _error_shape(body: bytes) -> None:
    error = json.loads(body)["error"]
    assert set(error) == {"type", "message", "field"}
    assert isinstance(error["type"], str)
    assert error["type"]
    assert isinstance(error["message"], str)
    assert error["message"]


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(target=TARGETS, body=BODY)
def test_any_body_is_answered_without_a_5xx(
    service: ApiService, target: tuple[str, str], body: object
) -> None:
    method, path = target
    status, answer = service.handle(method, path, body=msgspec.json.encode(body))
    assert 200 <= status < 500, answer
    json.loads(answer)
    if status >= 400:
        _error_shape(answer)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    content=st.text(min_size=1, max_size=60),
    key=st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=30),
)
def test_a_keyed_retry_answers_the_same_and_appends_nothing(
    service: ApiService, content: str, key: str
) -> None:
    body = msgspec.json.encode({"item": {"content": content}})
    ledger = service.engine.ledger
    first = service.handle("POST", "/v1/agents/a/items", body=body, idempotency_key="p-" + key)
    after_first = ledger.max_position()
    again = service.handle("POST", "/v1/agents/a/items", body=body, idempotency_key="p-" + key)
    assert again == first
    assert ledger.max_position() == after_first
