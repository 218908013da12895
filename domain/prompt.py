"""Cache-stable prompt composition: items → four segments → a static prefix and a dynamic tail."""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

import msgspec

from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.model import Item, Layer, Source, content_hash
from ctxledger.domain.working_set import is_working_set

__all__ = [
    "SEGMENT_ORDER",
    "PromptParts",
    "Segment",
    "assign_segment",
    "compose",
    "compose_append",
    "volatile_tail",
    "without_tail",
    "render_block",
    "render_item",
]


class Segment(enum.StrEnum):
    """Where rendered text sits in the prompt (the seed's prompt cache layers P0 to P3)."""

    ROLE = "role"
    SESSION = "session"
    GENERATION = "generation"
    VOLATILE = "volatile"


SEGMENT_ORDER: tuple[Segment, ...] = (
    Segment.ROLE,
    Segment.SESSION,
    Segment.GENERATION,
    Segment.VOLATILE,
)
"""Segments in prompt order; ROLE+SESSION are the static prefix, the rest the dynamic tail."""

_SESSION_SOURCE_RANK: dict[Source, int] = {
    Source.USER_REQUIREMENT: 0,
    Source.STEERING_NOTE: 1,
}
_OTHER_SESSION_RANK = 2  # pinned constraints and project memory

_HEADER_UNSAFE = str.maketrans({"\n": " ", "\r": " "})
_HEADER_FILES = 4  # files named in a block header; more are counted


class PromptParts(msgspec.Struct, frozen=True, kw_only=True):
    """A composed prompt.

    ``static`` = ROLE + SESSION (cacheable across generations), ``dynamic`` = GENERATION +
    VOLATILE, ``prefix_hash`` = SHA-256 of ``static``; ``segments`` holds every segment's text
    (``""`` when empty); ``order`` is the GENERATION item ids in rendered order (the next
    build's ``emitted_order``)."""

    static: str
    dynamic: str
    prefix_hash: str
    segments: dict[Segment, str]
    order: tuple[str, ...]

    @property
    def text(self) -> str:
        """The whole prompt: ``static + dynamic``."""
        return self.static + self.dynamic

    @property
    def stable(self) -> str:
        """The prompt without its VOLATILE tail (what a within-generation build only appends to)."""
        return self.static + self.segments[Segment.GENERATION]


def assign_segment(item: Item) -> Segment:
    """The segment an item is rendered in.

    role_instruction → ROLE; recalled_memory → VOLATILE (it is replaced on every prompt);
    user_requirement (the objective), steering notes, pinned items (constraints) and L3 project
    memory → SESSION; everything else → GENERATION.
    """
    if item.source is Source.ROLE_INSTRUCTION:
        return Segment.ROLE
    if item.source is Source.RECALLED_MEMORY:
        return Segment.VOLATILE
    if item.source in _SESSION_SOURCE_RANK or item.pinned or item.layer is Layer.L3:
        return Segment.SESSION
    return Segment.GENERATION


def _segment_within(item: Item, static_ids: Collection[str] | None) -> Segment:
    """The segment of *item* when the static part is frozen to *static_ids* (within a
    generation): new ROLE/SESSION-class items wait in GENERATION until the next boundary,
    and items already in the static part stay there, so the prefix is never disturbed."""
    seg = assign_segment(item)
    if static_ids is None or seg is Segment.VOLATILE:
        return seg
    if item.id in static_ids:
        return seg if seg in (Segment.ROLE, Segment.SESSION) else Segment.SESSION
    return Segment.GENERATION if seg in (Segment.ROLE, Segment.SESSION) else seg


@functools.lru_cache(maxsize=1 << 16)
def render_item(item: Item) -> str:
    """One item as a self-terminated block: ``### [<group> · ]<source>[ · <files>]``, the
    content, a blank line. The header names at most four files (``(+N)`` more) and none for
    a conversation turn (an agent's command names its own).

    Only the group (the step an action and its observation share, so a reader sees which
    step a block belongs to), the source, the files and the content are rendered: never the
    id, the agent, the observation time or any other provenance, so equal content renders
    to equal bytes. Memoised by the item's value: a pure function, and every build renders
    the items it kept."""
    return render_block(item, item.content)


def render_block(item: Item, content: str) -> str:
    """:func:`render_item` of *item* with *content* in place of its own (a clipped or
    compressed version, as the prompt will carry it); not memoised."""
    header = f"### {item.source.value}"
    if item.group:
        header = f"### {item.group.translate(_HEADER_UNSAFE)} · {item.source.value}"
    files = item.files
    if files and item.source is not Source.CONVERSATION:  # a command names its own files
        shown = ", ".join(f.translate(_HEADER_UNSAFE) for f in files[:_HEADER_FILES])
        more = len(files) - _HEADER_FILES
        header += f" · {shown}" + (f" (+{more})" if more > 0 else "")
    return f"{header}\n{content}\n\n"


def _block(title: str, body: str) -> str:
    return f"### {title}\n{body}\n\n" if body else ""


def _durability_key(item: Item, block: str) -> tuple[int, str, str]:
    # Durability descending, then content hash; the rendered block breaks remaining ties so the
    # bytes never depend on the order items arrive in.
    return (-int(item.durability), item.hash, block)


_LATE = 1 << 62  # an item the chronology does not know comes after every recorded one

NewKey = Callable[[tuple[Item, str]], tuple[object, ...]]


def _new_key(chronology: Mapping[str, int] | None) -> NewKey:
    """How new GENERATION items are sorted: with a *chronology* (item id → recording
    sequence), in the order they were recorded — the order the agent saw them, an action
    before its observation — with unknown ids last and a working-set item (the summary of
    the steps not shown) first; without one, the seed's (durability descending, content
    hash) order."""
    if chronology is None:
        return lambda p: _durability_key(*p)
    get = chronology.get
    return lambda p: (
        not is_working_set(p[0]),
        get(p[0].id, _LATE),
        *_durability_key(*p),
    )


def _content_key(item: Item, block: str) -> tuple[str, str]:
    return (item.hash, block)


def _session_key(item: Item, block: str) -> tuple[int, str, str]:
    rank = _SESSION_SOURCE_RANK.get(item.source, _OTHER_SESSION_RANK)
    return (rank, item.hash, block)


def _unique(items: Iterable[Item]) -> list[Item]:
    seen: set[str] = set()
    result: list[Item] = []
    for item in items:
        if item.id in seen:
            raise InvalidInputError(f"duplicate item id {item.id[:80]!r} in one prompt")
        seen.add(item.id)
        result.append(item)
    return result


def volatile_tail(*, status: str = "", recall: str = "", latest_user_input: str = "") -> str:
    """The end of the VOLATILE segment: the recall group, the status line, the user input."""
    return (
        _block(Source.RECALLED_MEMORY.value, recall)
        + _block("generation status", status)
        + _block("latest user input", latest_user_input)
    )


def compose_append(
    previous: PromptParts,
    added: Iterable[Item],
    *,
    status: str = "",
    recall: str = "",
    latest_user_input: str = "",
    chronology: Mapping[str, int] | None = None,
) -> PromptParts | None:
    """``compose`` of a within-generation append, in O(added): the previous prompt of the
    generation (as :func:`compose` made it, with ``static_ids`` frozen) keeps its ROLE, SESSION
    and GENERATION text and order, and the *added* items follow in GENERATION, sorted as
    ``compose`` sorts new items (by *chronology* when given). Equal to composing every item again with the previous order
    and the frozen static part (a property test holds the two equal).

    None when the fast path does not apply: recalled-memory items (VOLATILE, re-sorted with
    the previous ones) or an id repeated in *added*; the caller composes from scratch."""
    if previous.segments[Segment.VOLATILE]:
        return None
    seen: set[str] = set()
    pairs: list[tuple[Item, str]] = []
    for item in added:
        if item.id in seen or item.source is Source.RECALLED_MEMORY:
            return None
        seen.add(item.id)
        pairs.append((item, render_item(item)))
    if seen.intersection(previous.order):
        return None
    pairs.sort(key=_new_key(chronology))
    segments = dict(previous.segments)
    segments[Segment.GENERATION] += "".join(block for _, block in pairs)
    segments[Segment.VOLATILE] = volatile_tail(
        status=status, recall=recall, latest_user_input=latest_user_input
    )
    return PromptParts(
        static=previous.static,
        dynamic=segments[Segment.GENERATION] + segments[Segment.VOLATILE],
        prefix_hash=previous.prefix_hash,
        segments=segments,
        order=(*previous.order, *(item.id for item, _ in pairs)),
    )


def without_tail(prompt: PromptParts, tail: str) -> PromptParts:
    """*prompt* without the VOLATILE *tail* it was composed with (recalled-memory items stay):
    the previous prompt as :func:`compose` re-derives it for the next build of the generation."""
    volatile = prompt.segments[Segment.VOLATILE]
    if tail and volatile.endswith(tail):
        volatile = volatile[: -len(tail)]
    segments = {**prompt.segments, Segment.VOLATILE: volatile}
    return msgspec.structs.replace(
        prompt, dynamic=segments[Segment.GENERATION] + volatile, segments=segments
    )


def compose(
    items: Iterable[Item],
    *,
    emitted_order: Sequence[str] = (),
    status: str = "",
    recall: str = "",
    latest_user_input: str = "",
    static_ids: Collection[str] | None = None,
    chronology: Mapping[str, int] | None = None,
) -> PromptParts:
    """Compose a prompt from the items of a pack.

    ``static_ids`` (within a generation: the ids already in ROLE/SESSION) freezes the static
    part: other ROLE/SESSION-class items are appended to GENERATION until the next refresh or
    rebuild; ``None`` (a generation's first build) assigns every item afresh.

    ROLE and SESSION are sorted by stable keys (so they are byte-identical whatever order the
    items arrive in and whichever agent asks). GENERATION keeps ``emitted_order`` — the
    previous build's ``order`` — and appends new items after it: in recording order when a
    ``chronology`` (item id → recording sequence) is given, so the segment reads as a
    transcript (each step's action before its observation, older steps first), else in the
    seed's (durability descending, content hash) order; with an empty ``emitted_order`` (a
    rebuild, a refresh or the first build) the whole segment is sorted that way. Ids in ``emitted_order`` that are no longer GENERATION
    items are skipped. VOLATILE holds recalled-memory items, the ``recall`` group, the
    ``status`` line and the ``latest_user_input``, in that order.

    Raises InvalidInputError when two items share an id.
    """
    by_segment: dict[Segment, list[tuple[Item, str]]] = {s: [] for s in SEGMENT_ORDER}
    for item in _unique(items):
        by_segment[_segment_within(item, static_ids)].append((item, render_item(item)))

    role = sorted(by_segment[Segment.ROLE], key=lambda p: _content_key(*p))
    session = sorted(by_segment[Segment.SESSION], key=lambda p: _session_key(*p))

    generation_by_id = {item.id: (item, block) for item, block in by_segment[Segment.GENERATION]}
    kept: list[tuple[Item, str]] = []
    kept_ids: set[str] = set()
    for item_id in emitted_order:
        pair = generation_by_id.get(item_id)
        if pair is not None and item_id not in kept_ids:
            kept.append(pair)
            kept_ids.add(item_id)
    new = sorted(
        (p for p in by_segment[Segment.GENERATION] if p[0].id not in kept_ids),
        key=_new_key(chronology),
    )
    generation = kept + new

    recalled = sorted(by_segment[Segment.VOLATILE], key=lambda p: _durability_key(*p))

    segments = {
        Segment.ROLE: "".join(block for _, block in role),
        Segment.SESSION: "".join(block for _, block in session),
        Segment.GENERATION: "".join(block for _, block in generation),
        Segment.VOLATILE: "".join(block for _, block in recalled)
        + volatile_tail(status=status, recall=recall, latest_user_input=latest_user_input),
    }
    static = segments[Segment.ROLE] + segments[Segment.SESSION]
    return PromptParts(
        static=static,
        dynamic=segments[Segment.GENERATION] + segments[Segment.VOLATILE],
        prefix_hash=content_hash(static),
        segments=segments,
        order=tuple(item.id for item, _ in generation),
    )
