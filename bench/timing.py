"""Plain timing for the benchmarks: warm-up, interleaved samples, percentiles, fits and RSS."""

from __future__ import annotations

import gc
import math
import resource
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "Stats",
    "fit_exponent",
    "interleaved",
    "nlogn_exponent",
    "peak_rss_mb",
    "rss_mb",
    "stats",
    "timed",
]

Stats = dict[str, float]


def stats(samples: Sequence[float]) -> Stats:
    """Milliseconds: p50, p95, p99 (nearest rank), min, mean and the sample count."""
    ordered = sorted(samples)
    n = len(ordered)
    if not n:
        return {"n": 0, "p50": 0.0, "p95": 0.0, "p99": 0.0, "min": 0.0, "mean": 0.0}

    def rank(q: float) -> float:
        return ordered[max(0, math.ceil(q * n) - 1)] * 1e3

    return {
        "n": n,
        "p50": round(statistics.median(ordered) * 1e3, 3),
        "p95": round(rank(0.95), 3),
        "p99": round(rank(0.99), 3),
        "min": round(ordered[0] * 1e3, 3),
        "mean": round(statistics.fmean(ordered) * 1e3, 3),
    }


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """``(seconds, result)`` of one call."""
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def interleaved(
    fns: dict[str, Callable[[], Any]],
    *,
    repeat: int,
    warmup: int = 2,
    max_seconds: float | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, list[float]]:
    """Run every function ``warmup`` times, then ``repeat`` rounds of one call each, in
    rotating order, so that each sees the same machine noise. A full collection runs before
    each call; the collector stays enabled inside it, as in real use. Stops early (after at least 3 rounds) past
    ``max_seconds``. Returns the samples in seconds per name, read from *clock* (wall time by
    default; ``time.thread_time`` gives the CPU time of the measuring thread)."""
    names = list(fns)
    for _ in range(warmup):
        for name in names:
            fns[name]()
    samples: dict[str, list[float]] = {n: [] for n in names}
    began = time.perf_counter()
    for r in range(repeat):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            gc.collect()
            start = clock()
            fns[name]()
            samples[name].append(clock() - start)
        if max_seconds is not None and r >= 2 and time.perf_counter() - began > max_seconds:
            break
    return samples


def fit_exponent(sizes: Sequence[float], times: Sequence[float]) -> float:
    """Least-squares slope of log(time) over log(size): 1.0 is linear, ~1.1 is n·log n over
    these sizes, 2.0 quadratic."""
    pts = [(math.log(s), math.log(t)) for s, t in zip(sizes, times, strict=True) if s > 0 and t > 0]
    if len(pts) < 2:
        return float("nan")
    mx = statistics.fmean(p[0] for p in pts)
    my = statistics.fmean(p[1] for p in pts)
    den = sum((p[0] - mx) ** 2 for p in pts)
    return round(sum((p[0] - mx) * (p[1] - my) for p in pts) / den, 3) if den else float("nan")


def nlogn_exponent(sizes: Sequence[float]) -> float:
    """The exponent :func:`fit_exponent` reports for an exact n·log n cost over *sizes*."""
    return fit_exponent(sizes, [s * math.log(s) for s in sizes])


def _status(field: str) -> float | None:
    """A ``/proc/self/status`` memory field in MiB, or None where /proc is missing."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def rss_mb() -> float:
    """Current resident set size (MiB)."""
    now = _status("VmRSS")
    return now if now is not None else peak_rss_mb()


def peak_rss_mb() -> float:
    """Peak resident set size of this process (MiB): ``VmHWM`` of /proc, which is this
    program's own after an exec. ``ru_maxrss`` (the fallback) also counts the parent's
    memory at fork time on Linux, so it overstates a child's peak."""
    hwm = _status("VmHWM")
    if hwm is not None:
        return hwm
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
