"""The one backoff (``adapters/ledger/retry.py``) gives the delays of the formulas it replaced."""

from __future__ import annotations

import math
import random

import pytest

from ctxledger.adapters.ledger.retry import OUTAGE_PAUSE_S, backoff, retry_unavailable
from ctxledger.domain.errors import LedgerUnavailableError


def test_the_wal_switch_pauses_double_from_one_ms_to_fifty() -> None:
    delay, old = 0.001, []
    for _ in range(12):  # the loop store_files.wal_mode had
        old.append(delay)
        delay = min(delay * 2, 0.05)
    assert [backoff(a, first=0.001, cap=0.05) for a in range(12)] == old


def test_the_engines_conflict_pause_is_a_full_jitter_doubling_from_two_ms() -> None:
    for attempt in range(8):
        random.seed(attempt)
        old = random.uniform(0, 0.002 * 2**attempt)  # engine.py's formula
        random.seed(attempt)
        assert backoff(attempt, first=0.002, cap=math.inf, jitter=True) == old


def test_a_constant_pause_and_a_huge_attempt() -> None:
    assert {backoff(a, first=OUTAGE_PAUSE_S, cap=OUTAGE_PAUSE_S) for a in range(50)} == {0.1}
    assert backoff(10**6, first=0.001, cap=0.05) == 0.05  # no float overflow


def test_retry_unavailable_retries_until_it_answers_and_gives_up_after_the_deadline() -> None:
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise LedgerUnavailableError("down")
        return "up"

    assert retry_unavailable(flaky, within=5.0) == "up"
    assert len(calls) == 3

    def down() -> str:
        raise LedgerUnavailableError("down")

    with pytest.raises(LedgerUnavailableError):
        retry_unavailable(down, within=0.0)
