"""Sizes (short in CI, long under ``CTXLEDGER_SOAK=1``) and the figures each test reports."""

from __future__ import annotations

import json
import multiprocessing
import os
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

__all__ = [
    "FIGURES_DIR",
    "ROOT",
    "SOAK",
    "figures_path",
    "pick",
    "record",
    "recorded",
    "rerun",
    "spawn_workers",
]

T = TypeVar("T")

SOAK = os.environ.get("CTXLEDGER_SOAK") == "1"
"""True under ``make soak``: every test runs its long size."""

ROOT = Path(__file__).resolve().parents[2]
FIGURES_DIR = Path(os.environ.get("CTXLEDGER_FIGURES_DIR", ROOT / ".ctxledger" / "reliability"))
_LOCK = threading.Lock()
_RECORDED: list[dict[str, Any]] = []


def pick(short: T, long: T) -> T:
    """The size of this run: *long* under ``CTXLEDGER_SOAK=1``, else *short*."""
    return long if SOAK else short


def figures_path() -> Path:
    return FIGURES_DIR / f"figures-{'long' if SOAK else 'short'}.json"


def rerun(test_file: str) -> str:
    """The command that re-runs one test file at this run's size."""
    prefix = "CTXLEDGER_SOAK=1 " if SOAK else ""
    return f"{prefix}.venv/bin/pytest -q -s -p no:cacheprovider tests/reliability/{test_file}"


def record(test: str, *, scale: str, result: str, rerun_cmd: str, **numbers: Any) -> None:
    """Print one figure and merge it into ``figures-{short,long}.json`` (keyed by *test*)."""
    entry: dict[str, Any] = {
        "test": test,
        "scale": scale,
        "result": result,
        "rerun": rerun_cmd,
        "size": "long" if SOAK else "short",
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "numbers": numbers,
    }
    print(f"\n[reliability] {test} | {scale} | {result}", flush=True)
    with _LOCK:
        _RECORDED.append(entry)
        path = figures_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            current = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            current = {}
        if not isinstance(current, dict):
            current = {}
        current[test] = entry
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        tmp.replace(path)


def recorded() -> list[dict[str, Any]]:
    """Figures recorded by this pytest process, in order."""
    with _LOCK:
        return list(_RECORDED)


def spawn_workers(
    target: Callable[..., None],
    processes: int,
    *,
    args: Callable[[int], tuple[Any, ...]],
    kwargs: dict[str, Any],
    timeout: float,
    what: str,
) -> list[tuple[Any, ...]]:
    """Run *processes* ``spawn``ed workers ``target(*args(w), **kwargs, barrier=…,
    results=…)`` released together by the barrier. Each puts ``("ok", w, …)`` or ``("error",
    w, message, traceback)`` on the results queue; returns the ok tuples in arrival order.
    The first error (the others are released) or *timeout* seconds of silence fail the test;
    every process is joined, or killed, before returning."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(processes)
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=target,
            args=args(w),
            kwargs={**kwargs, "barrier": barrier, "results": results},
        )
        for w in range(processes)
    ]
    for p in procs:
        p.start()
    got: list[tuple[Any, ...]] = []
    try:
        while len(got) < processes:
            try:
                item = results.get(timeout=timeout)
            except queue.Empty:
                pytest.fail(f"only {len(got)} of {processes} {what}s reported in {timeout:g} s")
            if item[0] != "ok":
                barrier.abort()  # release the others; the first error is the finding
                pytest.fail(f"{what} {item[1]} failed: {item[2]}\n{item[3]}")
            got.append(item)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    return got
