"""Filling the room: kept units clipped to fit, then each unit in packing order included
whole (or scope-clipped), compressed, or dropped (``duplicate``, ``over_budget``).

Steps 5 and 6 of ``domain/packing.py``'s order of work, shared by the packer
(``domain/ranked_pack.py``) and the ``layered`` strategy."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from ctxledger.domain.clipping import CLIP_METHOD, CLIP_REASON, clip_text
from ctxledger.domain.compression import compress_text
from ctxledger.domain.model import Decision, Item, Source
from ctxledger.domain.packing import Accumulator, Candidate, Unit
from ctxledger.domain.pool_facts import PoolFacts
from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.positions import members_of
from ctxledger.domain.prompt import render_block
from ctxledger.domain.tiers import DUPLICATE, KEPT_CLIPPED, OVER_BUDGET

__all__ = [
    "COMPRESS_MIN_ROOM",
    "Filler",
    "block_tokens",
    "drop_tail",
    "fill_small_room",
    "include_kept",
    "kept_reserves",
]

_CONVERSATION = Source.CONVERSATION

_COMPRESS_MIN_TOKENS = 64  # smaller items are dropped, not compressed
COMPRESS_MIN_ROOM = 16  # do not try to compress into less room than this
_COMPRESS_MAX_ATTEMPTS = 32  # per build: bounds the work on huge pools with tiny budgets
_KEPT_MIN_ROOM = 24  # a kept unit gets at least this much room, or it is dropped over_budget


_KEPT_RESERVE = 256  # room held for each later kept unit while an earlier one is clipped


def kept_reserves(sizes: Sequence[int]) -> list[int]:
    """For each kept unit (most important first, of *sizes* tokens), the room held for the
    kept units after it — each up to :data:`_KEPT_RESERVE` — so that clipping the newest
    step to fit leaves the recent failures room too."""
    out: list[int] = []
    after = 0
    for size in reversed(sizes):
        out.append(after)
        after += min(size, _KEPT_RESERVE)
    out.reverse()
    return out


def include_kept(
    u: Unit,
    key: tuple[object, ...],
    *,
    limit: int,
    acc: Accumulator,
    counter: TokenCounter,
    clip_limit: int = 0,
    held: int = 0,
) -> None:
    """Include a kept unit in the room left, never past *limit*: whole when it fits; else a
    failure is first reduced to its key lines (heuristic extraction) and whatever still does
    not fit is head/tail-clipped (reason ``kept_clipped``). Dropped ``over_budget`` only when
    the room left is below a few tokens (forced content filled the budget). A unit that does
    not fit whole leaves *held* tokens to the kept units after it (``kept_reserves``) when
    it still gets its minimum room."""
    members = u.members
    versions = [_version(m, clip_limit, counter) for m in members]
    room = limit - acc.used
    if sum(v[1] for v in versions) <= room:
        acc.include_versions(members, versions, key)
        return
    headers = [block_tokens(m.item, "", counter) for m in members]
    allowance = sum(headers)
    if held and room - held - allowance >= _KEPT_MIN_ROOM * len(members):
        room -= held  # the kept units after this one keep *held* tokens, this one enough
    if room - allowance < _KEPT_MIN_ROOM * len(members):
        acc.drop_unit(u, OVER_BUDGET)
        return
    # (text, tokens, method) of each member after key-line extraction of failures
    shrunk: list[tuple[str, int, str]] = []
    for m, (text, t) in zip(members, versions, strict=True):
        body = m.item.content if text is None else text
        method = "" if text is None else CLIP_METHOD
        if m.item.failure and t > _COMPRESS_MIN_TOKENS:
            c = compress_text(body)
            if c is not None:
                ct = counter.count(c.text)
                if ct < t:
                    body, t, method = c.text, ct, c.method
        shrunk.append((body, t, method))
    total = sum(s[1] for s in shrunk)
    # the agent's own command (its conversation turn) stays whole while its output can give
    # up the room: an output cut short is marked, a command cut short misleads
    whole = [m.item.source is _CONVERSATION for m in members]
    spoken = sum(s[1] for s, w in zip(shrunk, whole, strict=True) if w)
    others = total - spoken
    if not any(whole) or all(whole) or spoken + allowance + _KEPT_MIN_ROOM > room:
        whole = [False] * len(members)
        spoken, others = 0, total
    final: list[tuple[str, int, str]] = []
    for (body, t, method), keep_whole in zip(shrunk, whole, strict=True):
        if not keep_whole and total + allowance > room:
            share = max(1, (room - allowance - spoken) * t // max(others, 1))
            clipped = clip_text(body, t, share, counter)
            if clipped is not None:
                body, t = clipped
                method = f"{method}+{CLIP_METHOD}" if method else CLIP_METHOD
        final.append((body, t, method))
    # a cut member is counted as rendered (its block header included), as a whole one is
    final = [
        (body, block_tokens(m.item, body, counter) if method else t, method)
        for m, (body, t, method) in zip(members, final, strict=True)
    ]
    if sum(f[1] for f in final) > room:
        acc.drop_unit(u, OVER_BUDGET)
        return
    for m, (body, t, method) in zip(members, final, strict=True):
        if not method:
            acc.include(m, key)
            continue
        action = "clipped" if method.endswith(CLIP_METHOD) else "compressed"
        acc.include(
            m, key, content=body, tokens=t, action=action, method=method, reason=KEPT_CLIPPED
        )


def block_tokens(item: Item, content: str, counter: TokenCounter) -> int:
    """Tokens of *item*'s block carrying *content* (a clipped or compressed version)."""
    return counter.count(render_block(item, content))


def _version(c: Candidate, clip_limit: int, counter: TokenCounter) -> tuple[str | None, int]:
    """The scope-clipped content and tokens (as rendered) of a candidate (``None`` content:
    unchanged)."""
    if clip_limit and c.tokens > clip_limit:
        clipped = clip_text(c.item.content, c.tokens, clip_limit, counter)
        if clipped is not None:
            return clipped[0], block_tokens(c.item, clipped[0], counter)
    return None, c.tokens


class Filler:
    """``pack``'s main loop for one unit at a time, in packing order: include it whole (or
    scope-clipped), compressed, or drop it (``duplicate``, ``over_budget``). Used by the
    packer (``domain/ranked_pack.py``) for what it does not decide inline."""

    __slots__ = (
        "acc",
        "attempts",
        "chronological",
        "clip_limit",
        "compress",
        "counter",
        "dedupe",
        "limit",
        "stop_at_first_miss",
        "stopped",
    )

    def __init__(
        self,
        acc: Accumulator,
        limit: int,
        counter: TokenCounter,
        *,
        clip_limit: int,
        chronological: bool,
        dedupe: bool,
        compress: bool,
        stop_at_first_miss: bool,
    ) -> None:
        self.acc = acc
        self.limit = limit
        self.counter = counter
        self.clip_limit = clip_limit
        self.chronological = chronological
        self.dedupe = dedupe
        self.compress = compress
        self.stop_at_first_miss = stop_at_first_miss
        self.attempts = 0
        self.stopped = False  # a stop-at-first-miss strategy missed: the rest is the tail

    def may_compress(self, tokens: int, remaining: int) -> bool:
        """Whether a unit of *tokens* that does not fit *remaining* gets a compression
        attempt (compression on, attempts left, enough room, a unit big enough)."""
        return (
            self.compress
            and self.attempts < _COMPRESS_MAX_ATTEMPTS
            and remaining >= COMPRESS_MIN_ROOM
            and tokens > _COMPRESS_MIN_TOKENS
        )

    def place(self, u: Unit) -> None:
        acc, limit, clip_limit, counter = self.acc, self.limit, self.clip_limit, self.counter
        if type(u) is Candidate:
            if self.dedupe and u.item.content in acc.contents:
                acc.drop(u, DUPLICATE)
                acc.strategies.add("dedupe")
                return
            remaining = limit - acc.used
            if remaining <= 0 or (
                u.tokens > remaining
                and not clip_limit
                and not self.may_compress(u.tokens, remaining)
            ):
                acc.drop(u, OVER_BUDGET)
                if self.stop_at_first_miss:
                    self.stopped = True
                return
            members: Sequence[Candidate] = (u,)
        else:
            remaining = limit - acc.used
            if remaining <= 0:
                acc.drop_unit(u, OVER_BUDGET)
                return
            members = u.members
        key = u.chrono_key() if self.chronological else u.priority_key()
        versions = [_version(m, clip_limit, counter) for m in members]
        total = sum(v[1] for v in versions)
        if total <= remaining:
            acc.include_versions(members, versions, key)
            return
        if self.may_compress(total, remaining):
            self.attempts += 1
            packed = _compress_unit(members, versions, clip_limit, counter)
            if packed is not None and sum(p[1] for p in packed) <= remaining:
                for m, (text, t, action, method) in zip(members, packed, strict=True):
                    if action == "included":
                        acc.include(m, key)
                    else:
                        acc.include(
                            m, key, content=text, tokens=t, action=action, method=method,
                            reason=OVER_BUDGET if action == "compressed" else CLIP_REASON,
                        )  # fmt: skip
                return
        acc.drop_unit(u, OVER_BUDGET)
        if self.stop_at_first_miss:
            self.stopped = True


def _compress_unit(
    members: Sequence[Candidate],
    versions: list[tuple[str | None, int]],
    clip_limit: int,
    counter: TokenCounter,
) -> list[tuple[str | None, int, str, str]] | None:
    """Compressed versions of a unit's members, or ``None`` if nothing got smaller."""
    out: list[tuple[str | None, int, str, str]] = []
    gained = False
    for m, (text, t) in zip(members, versions, strict=True):
        c = compress_text(m.item.content) if m.tokens > _COMPRESS_MIN_TOKENS else None
        if c is not None:
            ct = counter.count(c.text)
            ctext, method = c.text, c.method
            if clip_limit and ct > clip_limit:
                clipped = clip_text(ctext, ct, clip_limit, counter)
                if clipped is not None:
                    ctext, ct = clipped
                    method = f"{method}+{CLIP_METHOD}"
            ct = block_tokens(m.item, ctext, counter)
            if ct < t:
                out.append((ctext, ct, "compressed", method))
                gained = True
                continue
        out.append((text, t, "included" if text is None else "clipped", CLIP_METHOD))
    return out if gained else None


def fill_small_room(
    ordered: list[int],
    start: int,
    acc: Accumulator,
    facts: PoolFacts,
    limit: int,
    *,
    gmap: dict[str, list[int]],
    over: list[Decision],
    tokens: list[int],
    include: Callable[[int, int], None],
    place: Callable[[int], None],
) -> None:
    """The fill from *start* on when the room left is below what compression needs (and
    the packer neither de-duplicates nor stops at a first miss): each unit is included if
    it fits the room then left, else dropped ``over_budget``. Every member's decision is
    written ``over_budget`` first, in order; the few units whose first member alone fits
    the room at *start* (a group's total is no less) are then tried in order, an inclusion
    overwriting its decisions in place — the same decisions in the same order."""
    lv, group, ids = facts.layer_value, facts.group, facts.ids
    tail = ordered[start:]
    flat = members_of(tail, group, gmap)
    acc.decisions.update(zip(map(ids.__getitem__, flat), map(over.__getitem__, flat), strict=True))
    room = limit - acc.used
    taken: list[int] = []  # the members included
    for k in itertools.compress(tail, map(room.__ge__, map(tokens.__getitem__, tail))):
        remaining = limit - acc.used
        if remaining <= 0:
            break
        g = group[k]
        if g:
            members = gmap[g]
            if sum(map(tokens.__getitem__, members)) <= remaining:
                place(k)
                taken += members
        elif tokens[k] <= remaining:
            include(k, tokens[k])
            taken.append(k)
    acc.dropped += len(flat) - len(taken)
    layers = list(map(lv.__getitem__, flat))
    if taken:
        kept = list(map(lv.__getitem__, taken))
        acc.truncated.update(v for v in set(layers) if layers.count(v) > kept.count(v))
    else:
        acc.truncated.update(layers)


def drop_tail(
    ordered: list[int],
    start: int,
    acc: Accumulator,
    facts: PoolFacts,
    *,
    gmap: dict[str, list[int]],
    over: list[Decision],
    dedupe: bool,
) -> None:
    """``packing._drop_tail`` over pool positions: a duplicate of packed text is
    ``duplicate``, every other member ``over_budget``."""
    ids, lv, contents, group = facts.ids, facts.layer_value, facts.contents, facts.group
    decisions = acc.decisions
    tail = ordered[start:]
    if not dedupe:
        flat = members_of(tail, group, gmap)
        decisions.update(zip(map(ids.__getitem__, flat), map(over.__getitem__, flat), strict=True))
        acc.dropped += len(flat)
        acc.truncated.update(map(lv.__getitem__, flat))
        return
    packed = acc.contents
    members: list[int] = []  # of the groups in the tail
    dropped = len(tail)
    for k in tail:
        g = group[k]
        if g:
            ms = gmap[g]
            members += ms
            for m in ms:
                decisions[ids[m]] = over[m]
            dropped += len(ms) - 1
        elif dedupe and contents[k] in packed:
            acc.drop_id(ids[k], lv[k], over[k].tokens_before, DUPLICATE)
            acc.strategies.add("dedupe")
            dropped -= 1
        else:
            decisions[ids[k]] = over[k]
    acc.dropped += dropped
    acc.truncated.update(map(lv.__getitem__, tail), map(lv.__getitem__, members))
