"""Segment assignment and composed prompt bytes, checked against hand-written expectations."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import pytest

from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.model import Durability, Item, Layer, Source
from ctxledger.domain.prompt import Segment, assign_segment, compose, render_item


def item(
    item_id: str,
    source: Source,
    content: str,
    *,
    layer: Layer = Layer.L2,
    durability: Durability = Durability.SESSION,
    files: tuple[str, ...] = (),
    pinned: bool = False,
) -> Item:
    return Item(
        id=item_id,
        layer=layer,
        source=source,
        content=content,
        durability=durability,
        files=files,
        pinned=pinned,
        observed_at=datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC),
        agent="agent-42",
    )


@pytest.mark.parametrize(
    ("source", "layer", "pinned", "expected"),
    [
        (Source.ROLE_INSTRUCTION, Layer.L1, False, Segment.ROLE),
        (Source.ROLE_INSTRUCTION, Layer.L3, True, Segment.ROLE),
        (Source.USER_REQUIREMENT, Layer.L1, False, Segment.SESSION),
        (Source.STEERING_NOTE, Layer.L1, False, Segment.SESSION),
        (Source.TEST_RESULT, Layer.L1, True, Segment.SESSION),
        (Source.VERIFIED_FACT, Layer.L3, False, Segment.SESSION),
        (Source.RECALLED_MEMORY, Layer.L3, False, Segment.VOLATILE),
        (Source.RECALLED_MEMORY, Layer.L3, True, Segment.VOLATILE),
        (Source.WORKER_FINDING, Layer.L2, False, Segment.GENERATION),
        (Source.REPOSITORY_SOURCE, Layer.L0, False, Segment.GENERATION),
        (Source.PARENT_REPORT, Layer.L2, False, Segment.GENERATION),
        (Source.TOOL_LOG, Layer.L4, False, Segment.GENERATION),
    ],
)
def test_assign_segment(source: Source, layer: Layer, pinned: bool, expected: Segment) -> None:
    it = item("x", source, "c", layer=layer, pinned=pinned)
    assert assign_segment(it) is expected


def test_render_item_header_has_source_and_files_only() -> None:
    it = item("it_9f", Source.WORKER_FINDING, "body", files=("a.py", "b\nc.py"))
    assert render_item(it) == "### worker_finding · a.py, b c.py\nbody\n\n"


def test_compose_renders_the_hand_written_prompt() -> None:
    items = [
        item("t1", Source.TEST_RESULT, "FAILED test_x", durability=Durability.EPHEMERAL),
        item("s1", Source.STEERING_NOTE, "No schema changes.", layer=Layer.L1),
        item("f1", Source.WORKER_FINDING, "Off by one.", files=("auth/token.py",)),
        item("u1", Source.USER_REQUIREMENT, "Fix expiry.", layer=Layer.L1),
        item("r1", Source.ROLE_INSTRUCTION, "You are a worker.", layer=Layer.L1),
        item("m1", Source.RECALLED_MEMORY, "Build: make test", layer=Layer.L3),
    ]
    parts = compose(items, status="gen 2", latest_user_input="Go on.", recall="(none)")
    assert parts.static == (
        "### role_instruction\nYou are a worker.\n\n"
        "### user_requirement\nFix expiry.\n\n"
        "### steering_note\nNo schema changes.\n\n"
    )
    assert parts.dynamic == (
        "### worker_finding · auth/token.py\nOff by one.\n\n"
        "### test_result\nFAILED test_x\n\n"
        "### recalled_memory\nBuild: make test\n\n"
        "### recalled_memory\n(none)\n\n"
        "### generation status\ngen 2\n\n"
        "### latest user input\nGo on.\n\n"
    )
    assert parts.order == ("f1", "t1")
    assert parts.prefix_hash == hashlib.sha256(parts.static.encode()).hexdigest()


def test_emitted_order_is_kept_and_new_items_append() -> None:
    durable = item("d", Source.VERIFIED_FACT, "durable", durability=Durability.DURABLE)
    ephemeral = item("e", Source.TOOL_LOG, "ephemeral", durability=Durability.EPHEMERAL)
    new = item("n", Source.WORKER_FINDING, "new", durability=Durability.DURABLE)
    first = compose([durable, ephemeral])
    assert first.order == ("d", "e")
    # A durable newcomer goes after the emitted items, not before the ephemeral one.
    second = compose([new, ephemeral, durable], emitted_order=first.order)
    assert second.order == ("d", "e", "n")
    # At a refresh (no emitted order) the segment is re-sorted: durable first.
    assert compose([new, ephemeral, durable]).order[-1] == "e"


def test_emitted_ids_no_longer_in_generation_are_skipped() -> None:
    a = item("a", Source.WORKER_FINDING, "a")
    b = item("b", Source.WORKER_FINDING, "b", pinned=True)  # pinned since: now SESSION
    parts = compose([a, b], emitted_order=("gone", "b", "a", "a"))
    assert parts.order == ("a",)
    assert "### worker_finding\nb\n\n" in parts.static


def test_empty_compose() -> None:
    parts = compose([])
    assert parts.static == parts.dynamic == ""
    assert parts.order == ()
    assert parts.prefix_hash == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def test_duplicate_ids_are_rejected() -> None:
    a = item("same", Source.WORKER_FINDING, "a")
    b = item("same", Source.TOOL_LOG, "b")
    with pytest.raises(InvalidInputError, match="duplicate item id"):
        compose([a, b])
