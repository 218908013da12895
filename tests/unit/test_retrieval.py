"""Retrieval scoring: overlap, task, recency, confidence, durability, role and phase."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
from hypothesis import given

from ctxledger.domain.model import Durability, Item, Layer, Source
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.retrieval import item_terms, retrieve, score_item
from tests.property.strategies_items import build_requests, item_pools

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


def item(item_id: str, content: str = "neutral text", **kw: object) -> Item:
    fields: dict[str, object] = {
        "id": item_id,
        "layer": Layer.L2,
        "source": Source.WORKER_FINDING,
        "content": content,
        "observed_at": NOW - timedelta(hours=1),
    }
    fields.update(kw)
    return msgspec.convert(fields, Item, from_attributes=True, strict=False)


def req(**kw: object) -> BuildRequest:
    return msgspec.structs.replace(BuildRequest(agent_id="a", budget=1000, now=NOW), **kw)


def test_keyword_overlap_beats_no_overlap() -> None:
    r = req(task="fix the login token refresh")
    hit = item("a", "login token refresh fails after expiry")
    miss = item("b", "database migration notes")
    assert score_item(hit, r) > score_item(miss, r)


def test_file_and_symbol_overlap_count() -> None:
    r = req(files=("src/auth/login.py",), symbols=("AuthService.refresh",))
    by_field = item("a", files=("src/auth/login.py",), symbols=("AuthService.refresh",))
    by_mention = item("b", "see login.py where refresh() is called")
    none = item("c", "unrelated")
    assert score_item(by_field, r) > score_item(by_mention, r) > score_item(none, r)


def test_failure_words_weigh_double_on_failures() -> None:
    r = req(failures=("FAILED tests/test_login.py::test_refresh - KeyError",))
    failing = item("a", "test_refresh raised KeyError", failure=True)
    finding = item("b", "test_refresh raised KeyError")
    assert score_item(failing, r) > score_item(finding, r)


def test_same_task_beats_other_task() -> None:
    r = req(task="t-42")
    assert score_item(item("a", task="t-42"), r) > score_item(item("b", task="t-7"), r)


def test_recent_beats_old() -> None:
    r = req()
    recent = item("a", observed_at=NOW - timedelta(minutes=5))
    old = item("b", observed_at=NOW - timedelta(days=20))
    undated = item("c", observed_at=None)
    assert score_item(recent, r) > score_item(old, r) > score_item(undated, r)


def test_naive_timestamps_are_read_as_utc() -> None:
    r = req()
    aware = item("a", observed_at=NOW - timedelta(hours=3))
    naive = item("b", observed_at=(NOW - timedelta(hours=3)).replace(tzinfo=None))
    assert score_item(aware, r) == score_item(naive, r)


def test_confidence_and_durability_raise_the_score() -> None:
    r = req()
    assert score_item(item("a", confidence=0.9), r) > score_item(item("b", confidence=0.2), r)
    durable = item("c", durability=Durability.DURABLE)
    ephemeral = item("d", durability=Durability.EPHEMERAL)
    assert score_item(durable, r) > score_item(ephemeral, r)
    nan = item("e", confidence=float("nan"))
    assert score_item(nan, r) == score_item(item("f", confidence=0.0), r)


def test_other_phase_scores_lower_than_same_or_unknown_phase() -> None:
    r = req(phase="implement")
    same = item("a", phase="implement")
    unknown = item("b", phase="")
    other = item("c", phase="explore")
    assert score_item(same, r) > score_item(unknown, r) > score_item(other, r)


def test_role_prefers_its_sources() -> None:
    report = item("a", source=Source.PARENT_REPORT)
    code = item("b", source=Source.REPOSITORY_SOURCE)
    primary = req(role="Primary")
    worker = req(role="worker")
    assert score_item(report, primary) > score_item(code, primary)
    assert score_item(code, worker) > score_item(report, worker)


def test_retrieve_orders_best_first_and_breaks_ties_by_id() -> None:
    r = req(task="login")
    pool = [item("z"), item("m", "login bug"), item("a")]
    out = retrieve(r, pool)
    assert [s.item.id for s in out] == ["m", "a", "z"]
    assert out[1].score == out[2].score
    assert out[0].score > out[1].score


def test_terms_keep_paths_and_basenames() -> None:
    terms = item_terms("error in src/auth/login.py:42 while calling Session.refresh")
    assert {"src/auth/login.py", "login.py"} <= terms.paths
    assert {"error", "session", "refresh", "calling"} <= terms.words


@given(item_pools(max_size=15), build_requests())
def test_retrieve_is_deterministic_and_complete(pool: list[Item], request: BuildRequest) -> None:
    a = retrieve(request, pool)
    copy = msgspec.json.decode(msgspec.json.encode(pool), type=list[Item])
    b = retrieve(request, copy)
    assert [(s.item.id, s.score) for s in a] == [(s.item.id, s.score) for s in b]
    assert sorted(s.item.id for s in a) == sorted(it.id for it in pool)
    keys = [(-s.score, s.item.id) for s in a]
    assert keys == sorted(keys)
    # Scoring each item alone gives the same score as in the whole pool (no cross-talk).
    for s in a:
        assert score_item(s.item, request) == s.score
