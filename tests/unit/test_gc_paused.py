"""``gc_paused`` — the collector off while a replay builds long-lived read models — puts what
it allocated straight into the oldest generation: no young collection scans a whole replay
at once afterwards, cyclic garbage is still collected, and a process that froze objects of
its own keeps them frozen."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from ctxledger.adapters.ledger.projection_runner import gc_paused


@pytest.fixture(autouse=True)
def _collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    gc.unfreeze()
    if not was:
        gc.disable()


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_what_the_pause_allocated_lands_in_the_oldest_generation() -> None:
    gc.collect()
    with gc_paused():
        assert not gc.isenabled()
        kept = [[i] for i in range(50_000)]  # tracked containers, as read models are
        assert gc.get_count()[0] >= 50_000
    assert gc.isenabled()
    young = gc.get_count()[0]
    assert young < 1_000  # counted young, they would trigger a collection scanning them all
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert id(kept) in oldest
    assert id(kept[-1]) in oldest
    assert gc.get_freeze_count() == 0


def test_cyclic_garbage_of_the_pause_is_still_collected() -> None:
    with gc_paused():
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        alive = weakref.ref(a)
        del a, b
    assert alive() is not None  # a cycle: only the collector frees it
    gc.collect()
    assert alive() is None


def test_a_process_that_froze_objects_keeps_them_frozen() -> None:
    gc.freeze()
    frozen = gc.get_freeze_count()
    assert frozen > 0
    with gc_paused():
        _ = [[i] for i in range(1_000)]
    assert gc.get_freeze_count() == frozen
    assert gc.isenabled()


def test_a_nested_pause_leaves_the_collector_to_the_outermost() -> None:
    with gc_paused():
        with gc_paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()
    with gc_paused():
        pass
    assert not gc.isenabled()
