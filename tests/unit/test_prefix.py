"""Longest common prefixes, prefix reuse and changed segments on hand-worked examples."""

from __future__ import annotations

import pytest

from ctxledger.domain.model import Item, Layer, Source
from ctxledger.domain.prefix import (
    changed_segment,
    lcp_bytes,
    prefix_reuse,
    prefix_reuse_within_generations,
)
from ctxledger.domain.prompt import compose


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (b"", b"", 0),
        (b"", b"abc", 0),
        (b"abc", b"abc", 3),
        (b"abc", b"abd", 2),
        (b"abc", b"abcdef", 3),
        (b"xbc", b"abc", 0),
        ("é".encode(), "è".encode(), 1),  # c3 a9 / c3 a8: bytes, not characters
        (b"a" * 1000 + b"X" + b"a" * 50, b"a" * 1000 + b"Y" + b"a" * 50, 1000),
        (b"q" * 100_000 + b"1", b"q" * 100_000 + b"2", 100_000),
        (b"q" * 65 + b"1" + b"q" * 10_000, b"q" * 65 + b"2" + b"q" * 10_000, 65),
        (b"q" * 63 + b"1" + b"q" * 10_000, b"q" * 63 + b"2" + b"q" * 10_000, 63),
        # non-periodic prefix: a window compared at the wrong offset would not match
        (bytes(range(256)) * 8 + b"X", bytes(range(256)) * 8 + b"Y", 2048),
        (bytes(range(256)) * 3 + b"\x00abc", bytes(range(256)) * 3 + b"\x00abd", 771),
    ],
)
def test_lcp_bytes(a: bytes, b: bytes, expected: int) -> None:
    assert lcp_bytes(a, b) == expected
    assert lcp_bytes(b, a) == expected


def test_prefix_reuse_hand_examples() -> None:
    # pairs: ("ab","abc") lcp 2, ("abc","abcd") lcp 3; bytes after the first: 3 + 4
    assert prefix_reuse(["ab", "abc", "abcd"]) == pytest.approx(5 / 7)
    # nothing shared
    assert prefix_reuse(["abc", "xyz"]) == 0.0
    # identical prompts reuse everything
    assert prefix_reuse(["same", "same", "same"]) == 1.0
    # fewer than two prompts, or only empty prompts after the first: nothing to compare
    assert prefix_reuse([]) == 0.0
    assert prefix_reuse(["only"]) == 0.0
    assert prefix_reuse(["x", ""]) == 0.0
    # UTF-8 bytes: "é" is two bytes; pair ("é", "éa") shares 2 of 3 bytes
    assert prefix_reuse(["é", "éa"]) == pytest.approx(2 / 3)


def test_prefix_reuse_within_generations_skips_boundaries() -> None:
    prompts = [(1, "ab"), (1, "abc"), (2, "zz"), (2, "zzz"), (3, "q")]
    # counted pairs: (ab, abc) lcp 2 of 3; (zz, zzz) lcp 2 of 3; (abc, zz) and (zzz, q) skipped
    assert prefix_reuse_within_generations(prompts) == pytest.approx(4 / 6)
    assert prefix_reuse_within_generations([(1, "a"), (2, "a")]) == 0.0
    assert prefix_reuse_within_generations([]) == 0.0


def _item(item_id: str, source: Source, content: str) -> Item:
    return Item(id=item_id, layer=Layer.L2, source=source, content=content)


def test_changed_segment() -> None:
    role = _item("r", Source.ROLE_INSTRUCTION, "role")
    goal = _item("u", Source.USER_REQUIREMENT, "goal")
    finding = _item("f", Source.WORKER_FINDING, "finding")
    base = compose([role, goal, finding], status="s1")
    assert changed_segment(base, base) == ""
    assert changed_segment(base, compose([role, goal, finding], status="s2")) == "volatile"
    appended = compose(
        [role, goal, finding, _item("g", Source.TEST_RESULT, "t")], emitted_order=base.order
    )
    assert changed_segment(base, appended) == "generation"
    steered = compose([role, goal, finding, _item("n", Source.STEERING_NOTE, "n")], status="s1")
    assert changed_segment(base, steered) == "session"
    other_role = compose([_item("r", Source.ROLE_INSTRUCTION, "other"), goal, finding])
    assert changed_segment(base, other_role) == "role"
