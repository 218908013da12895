"""Deterministic synthetic item pools and build requests for the benchmarks (seeded, no I/O)."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from ctxledger.domain.model import Durability, Item, Layer, Source
from ctxledger.domain.request import BuildRequest

__all__ = ["BUDGET", "START", "TASK", "make_pool", "make_request", "pool_tokens"]

BUDGET = 100_000
"""Token budget of every build benchmark (the issue's 100k)."""
START = datetime(2025, 1, 1, tzinfo=UTC)
TASK = "bench-task"

_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "ta", "vo", "zi", "pe", "qu", "sa", "do", "fe", "gi")
_LOG_LINES = (
    "FAILED tests/test_{f}.py::test_{w} - AssertionError: expected {w}",
    "Traceback (most recent call last):",
    '  File "src/{f}.py", line {n}, in {w}',
    "ValueError: bad {w} in {f}",
    "collected {n} items",
    "$ pytest -q tests/test_{f}.py",
    "===== {n} passed in 0.{n}s =====",
)
# (weight, layer, source, durability) of the generated items after the fixed head
_KINDS: tuple[tuple[int, Layer, Source, Durability], ...] = (
    (30, Layer.L0, Source.TOOL_LOG, Durability.EPHEMERAL),
    (15, Layer.L0, Source.CONVERSATION, Durability.EPHEMERAL),
    (12, Layer.L0, Source.REPOSITORY_SOURCE, Durability.SESSION),
    (10, Layer.L0, Source.TEST_RESULT, Durability.SESSION),
    (10, Layer.L2, Source.WORKER_FINDING, Durability.SESSION),
    (5, Layer.L2, Source.PARENT_REPORT, Durability.SESSION),
    (5, Layer.L0, Source.ARTIFACT, Durability.SESSION),
    (5, Layer.L4, Source.CONVERSATION, Durability.EPHEMERAL),
    (4, Layer.L3, Source.VERIFIED_FACT, Durability.DURABLE),
    (4, Layer.L1, Source.USER_REQUIREMENT, Durability.DURABLE),
)
_WEIGHTS = [k[0] for k in _KINDS]


def _vocabulary(rng: random.Random, size: int) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def _line_bank(rng: random.Random, vocab: list[str], files: list[str], size: int) -> list[str]:
    """Lines that item texts are drawn from: prose-like word runs and test/traceback lines."""
    lines = []
    for _ in range(size):
        if rng.random() < 0.25:
            line = rng.choice(_LOG_LINES).format(
                f=rng.choice(files).rsplit("/", 1)[-1][:-3],
                w=rng.choice(vocab),
                n=rng.randint(1, 999),
            )
        else:
            line = " ".join(rng.choice(vocab) for _ in range(rng.randint(4, 14)))
        lines.append(line)
    return lines


def _content(rng: random.Random, bank: list[str], n: int) -> str:
    """Text of roughly lognormal length (median ≈ 300 characters, long tail to ~16k)."""
    target = min(16_000, int(rng.lognormvariate(5.7, 0.9)))
    parts = [f"#{n}"]
    length = 0
    size = len(bank)
    while length < target:
        line = bank[int(rng.random() * size)]
        parts.append(line)
        length += len(line) + 1
    return "\n".join(parts)


def make_pool(n: int, *, seed: int = 7, count: Callable[[str], int] | None = None) -> list[Item]:
    """*n* items with pre-filled token counts — *count* of the content (the benchmarks pass
    tiktoken's, so a budget holds what it says), or ≈ characters / 4 without: an objective and a few
    pinned steering notes, role instructions, then a mix of tool logs, conversation (grouped
    with the next tool log, as a call and its result), code, test results (some failing),
    findings, reports, artifacts with versions, raw history and project memory."""
    rng = random.Random(seed)
    vocab = _vocabulary(rng, 3000)
    files = [f"src/pkg{i % 17}/mod{i}.py" for i in range(300)]
    symbols = [f"Mod{i}.{rng.choice(vocab)}" for i in range(500)]
    bank = _line_bank(rng, vocab, files, 4000)
    items: list[Item] = []

    def add(layer: Layer, source: Source, durability: Durability, **extra: object) -> None:
        k = len(items)
        content = str(extra.pop("content", "")) or _content(rng, bank, k)
        items.append(
            Item(
                id=f"it{k:07d}",
                layer=layer,
                source=source,
                content=content,
                token_count=max(1, count(content) if count else len(content) // 4),
                task=TASK if rng.random() < 0.5 else "other-task",
                observed_at=START + timedelta(seconds=k),
                confidence=rng.random(),
                relevance=rng.random(),
                durability=durability,
                files=tuple(rng.sample(files, rng.randint(0, 2))),
                symbols=tuple(rng.sample(symbols, rng.randint(0, 1))),
                **extra,  # type: ignore[arg-type]
            )
        )

    add(
        Layer.L1,
        Source.USER_REQUIREMENT,
        Durability.DURABLE,
        content="Objective: make tests/test_mod1.py pass without breaking the public API.",
        pinned=True,
        mandatory=True,
    )
    for _ in range(min(3, max(0, n - 1))):
        add(Layer.L1, Source.STEERING_NOTE, Durability.DURABLE, pinned=True)
    for _ in range(min(2, max(0, n - len(items)))):
        add(Layer.L1, Source.ROLE_INSTRUCTION, Durability.DURABLE)
    pending_group = ""
    while len(items) < n:
        _, layer, source, durability = rng.choices(_KINDS, weights=_WEIGHTS)[0]
        extra: dict[str, object] = {}
        if pending_group and source is Source.TOOL_LOG:
            extra["group"] = pending_group
            pending_group = ""
        elif source is Source.CONVERSATION and layer is Layer.L0:
            pending_group = f"g{len(items)}"
            extra["group"] = pending_group
        if source is Source.ARTIFACT:
            extra["source_id"] = f"artifact-{rng.randint(0, 40)}"
        if source in (Source.TEST_RESULT, Source.TOOL_LOG) and rng.random() < 0.15:
            extra["failure"] = True
        if source is Source.VERIFIED_FACT:
            extra["verified"] = True
        add(layer, source, durability, **extra)
    return items[:n]


def make_request(
    pool: list[Item], *, budget: int = BUDGET, strategy: str = "variable"
) -> BuildRequest:
    """A worker's request for the pool's task, with a few files, symbols and a failure."""
    last = max((i.observed_at for i in pool if i.observed_at is not None), default=START)
    files = tuple(sorted({f for i in pool[-50:] for f in i.files}))[:3]
    symbols = tuple(sorted({s for i in pool[-50:] for s in i.symbols}))[:2]
    return BuildRequest(
        agent_id="bench",
        budget=budget,
        now=last + timedelta(seconds=1),
        task=TASK,
        role="worker",
        strategy=strategy,
        files=files,
        symbols=symbols,
        keywords=("pytest", "ValueError"),
        failures=("FAILED tests/test_mod1.py::test_run - AssertionError",),
    )


def pool_tokens(pool: list[Item]) -> int:
    """Sum of the pool's token counts."""
    return sum(i.token_count for i in pool)
