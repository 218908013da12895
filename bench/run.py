"""``make bench``: run every benchmark, write bench/results.json, regenerate docs/performance.md.

    .venv/bin/python bench/run.py            # full run; results in a temporary file
    .venv/bin/python bench/run.py --docs     # also bench/results.json + docs/performance.md
    .venv/bin/python bench/run.py --quick    # smoke run at small sizes (about a minute)
    .venv/bin/python bench/run.py --only turn,build

Sections: turn (record + build + render CPU by history size, over a session, beside
LangChain's trim_messages), build (latency vs the limit pipeline), ledger (append/replay vs raw sqlite3),
scale (1M-event replay with peak RSS in a child process), postgres, growth (ledger bytes per
turn), peers (append-only, LangChain, OpenHands, every strategy), memory (100k-pool build RSS),
secrets (the record-time secret scan: ms per KiB of text, and per recorded item).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make the ``bench`` package importable
    sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402
from bench.build_latency import run_build_latency  # noqa: E402
from bench.encryption_cost import run_encryption_cost  # noqa: E402
from bench.growth import run_growth  # noqa: E402
from bench.ledger_io import (  # noqa: E402
    append_batched,
    append_per_turn,
    make_template,
    rate,
    raw_sqlite_append,
    raw_sqlite_replay,
    replay_ledger,
    replicas,
    sqlite_bulk_load,
)
from bench.peers import run_peers  # noqa: E402
from bench.replay_cases import cold_open, one_agent  # noqa: E402
from bench.scale import child_replay, replay_in_child, run_postgres  # noqa: E402
from bench.secret_scan_cost import run_secret_scan_cost  # noqa: E402
from bench.timing import peak_rss_mb, rss_mb  # noqa: E402
from bench.turn import run_turns  # noqa: E402

__all__ = ["FULL", "QUICK", "Config", "main", "run"]

SECTIONS = (
    "turn",
    "build",
    "ledger",
    "scale",
    "postgres",
    "growth",
    "peers",
    "memory",
    "secrets",
    "encryption",
)
TRAJECTORIES = ROOT.parent / "shared" / "trajectories"


@dataclasses.dataclass(frozen=True)
class Config:
    """Sizes of one run."""

    name: str
    sizes: tuple[int, ...]
    engine_sizes: tuple[int, ...]
    repeat: int
    max_seconds: float
    template_agents: int
    template_turns: int
    ledger_events: int
    per_turn_events: int
    ledger_rounds: int
    scale_events: int
    pg_events: int
    growth_turns: int
    long_steps: int
    peer_budget: int
    memory_pool: int
    turn_sizes: tuple[int, ...] = (1_000, 10_000, 20_000, 100_000)
    session_turns: int = 2_000
    one_agent_items: int = 50_000
    trajectories: bool = True
    openhands: bool = True
    scale_tenth: bool = True
    secret_kib: int = 512
    encryption_items: int = 3_000
    wide_events: int = 400_000  # replay vs raw on a wider log (the 400k / 800 agents)


FULL = Config(
    name="full",
    sizes=(1_000, 10_000, 100_000),
    engine_sizes=(1_000, 10_000),
    repeat=30,
    max_seconds=45.0,
    template_agents=20,
    template_turns=100,
    ledger_events=100_000,
    per_turn_events=10_000,
    ledger_rounds=3,
    scale_events=1_000_000,
    pg_events=100_000,
    growth_turns=500,
    long_steps=300,
    peer_budget=8_000,
    memory_pool=100_000,
)
QUICK = Config(
    name="quick",
    sizes=(500, 2_000, 5_000),
    engine_sizes=(1_000,),
    repeat=8,
    max_seconds=5.0,
    template_agents=5,
    template_turns=40,
    ledger_events=5_000,
    per_turn_events=1_000,
    ledger_rounds=2,
    scale_events=30_000,
    pg_events=5_000,
    growth_turns=100,
    long_steps=60,
    peer_budget=8_000,
    memory_pool=5_000,
    turn_sizes=(500, 2_000),
    session_turns=200,
    one_agent_items=4_000,
    secret_kib=16,
    encryption_items=200,
    wide_events=20_000,
)


def _log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _uname() -> str:
    try:
        out = subprocess.run(
            ["uname", "-a"], capture_output=True, text=True, check=True, timeout=10
        )
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return " ".join(x for x in platform.uname() if x)


def machine() -> dict[str, Any]:
    """Date and machine of the run."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "uname": _uname(),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "load_before": [round(x, 2) for x in load],
    }


def _rows(template: list[Any], events: int) -> list[Any]:
    copies = max(1, -(-events // len(template)))
    return [r for chunk in replicas(template, copies) for r in chunk][:events]


def section_ledger(cfg: Config, template: list[Any], tmp: Path) -> dict[str, Any]:
    """Append (batched, per turn) and replay through the ledger beside raw sqlite3."""
    rows = _rows(template, cfg.ledger_events)
    turn_rows = rows[: cfg.per_turn_events]
    out: dict[str, Any] = {"events": len(rows), "per_turn_events": len(turn_rows)}
    batched, raw_batched, per_turn, raw_turn = [], [], [], []
    replay, read, raw_replay = [], [], []
    for r in range(cfg.ledger_rounds):
        url_path = tmp / f"ledger-{r}.db"
        batched.append(append_batched(f"sqlite:///{url_path}", rows))
        raw_batched.append(raw_sqlite_append(str(tmp / f"raw-{r}.db"), rows))
        t, groups = append_per_turn(f"sqlite:///{tmp / f'turns-{r}.db'}", turn_rows)
        per_turn.append(t)
        out["per_turn_transactions"] = groups
        raw_turn.append(raw_sqlite_append(str(tmp / f"raw-turns-{r}.db"), turn_rows, per_turn=True))
        replay.append(replay_ledger(f"sqlite:///{url_path}")[0])
        read.append(replay_ledger(f"sqlite:///{url_path}", projections=False)[0])
        raw_replay.append(raw_sqlite_replay(str(url_path))[0])
    med = sorted

    def m(xs: list[float]) -> float:
        return med(xs)[len(xs) // 2]

    n, k = len(rows), len(turn_rows)
    out.update(
        {
            "append_batched_per_s": rate(n, m(batched)),
            "raw_append_batched_per_s": rate(n, m(raw_batched)),
            "append_per_turn_per_s": rate(k, m(per_turn)),
            "raw_append_per_turn_per_s": rate(k, m(raw_turn)),
            "replay_per_s": rate(n, m(replay)),
            "read_per_s": rate(n, m(read)),
            "raw_replay_per_s": rate(n, m(raw_replay)),
            "append_ratio": round(m(raw_batched) / m(batched), 3),
            "append_per_turn_ratio": round(m(raw_turn) / m(per_turn), 3),
            "replay_ratio": round(m(raw_replay) / m(replay), 3),
            "read_ratio": round(m(raw_replay) / m(read), 3),
            "payload_bytes_mean": round(sum(len(r[3]) for r in rows) / n),
        }
    )
    out["wide"] = _wide_replay(cfg, template, tmp)
    _log(f"ledger: wide replay {out['wide']}")
    _log("ledger: opening an engine on the log with no saved read models")
    out["cold_open"] = cold_open(tmp / "ledger-0.db")
    _log(f"ledger: cold open {out['cold_open']}")
    out["one_agent"] = one_agent(cfg.one_agent_items, log=_log)
    _log(f"ledger: one agent {out['one_agent']}")
    return out


def _wide_replay(cfg: Config, template: list[Any], tmp: Path) -> dict[str, Any]:
    """Replay through every projection beside raw sqlite3 + msgspec on a log of
    ``cfg.wide_events`` events with more agents (each replica renames the template's agents),
    loaded with plain sqlite3; rounds interleaved, medians."""
    path = tmp / "wide.db"
    copies = max(1, -(-cfg.wide_events // len(template)))
    chunks = replicas(template, copies)
    last = cfg.wide_events - (copies - 1) * len(template)  # the last copy is cut to size
    _, count = sqlite_bulk_load(
        str(path), (c if k < copies - 1 else c[:last] for k, c in enumerate(chunks))
    )
    ours, raw = [], []
    for _ in range(cfg.ledger_rounds):
        ours.append(replay_ledger(f"sqlite:///{path}")[0])
        raw.append(raw_sqlite_replay(str(path))[0])
    path.unlink()
    o, w = sorted(ours)[len(ours) // 2], sorted(raw)[len(raw) // 2]
    return {
        "events": count,
        "agents": cfg.template_agents * copies,
        "replay_per_s": rate(count, o),
        "raw_replay_per_s": rate(count, w),
        "replay_ratio": round(w / o, 3),
    }


def section_scale(cfg: Config, template: list[Any], tmp: Path) -> dict[str, Any]:
    """Replay of a large log (and of one tenth of it) in child processes: rate and RSS."""
    out: dict[str, Any] = {}
    sizes = {"large": cfg.scale_events}
    if cfg.scale_tenth:
        sizes["tenth"] = max(1, cfg.scale_events // 10)
    for label, events in sizes.items():
        path = tmp / f"scale-{label}.db"
        copies = max(1, -(-events // len(template)))

        def chunks(copies: int = copies, events: int = events) -> Any:
            left = events
            for chunk in replicas(template, copies):
                yield chunk[:left]
                left -= len(chunk)
                if left <= 0:
                    return

        load_s, count = sqlite_bulk_load(str(path), chunks())
        url = f"sqlite:///{path}"
        out[label] = {
            "events": count,
            "db_mb": round(path.stat().st_size / 2**20, 1),
            "bulk_load_per_s": rate(count, load_s),
            "projections": replay_in_child(url, "projections"),
            "read": replay_in_child(url, "read"),
        }
        _log(f"scale {label}: {out[label]['projections']}")
        if label == "tenth":
            path.unlink()
    return out


def child_build_rss(n: int) -> dict[str, Any]:
    """In a fresh process: RSS of an n-item pool, and the peak during one build over it."""
    from bench.pools import make_pool, make_request
    from ctxledger.adapters.tokens import default_counter
    from ctxledger.domain.generation_policy import plan_build
    from ctxledger.domain.prompt import compose

    base = rss_mb()
    pool = make_pool(n)
    request = make_request(pool)
    counter = default_counter()
    with_pool = rss_mb()
    pool_peak = peak_rss_mb()
    start = time.perf_counter()
    plan = plan_build(request, pool, None, counter)
    compose(plan.result.items, emitted_order=plan.emitted_order)
    took = time.perf_counter() - start
    return {
        "items": n,
        "rss_base_mb": base,
        "rss_with_pool_mb": with_pool,
        "peak_before_build_mb": pool_peak,
        "peak_rss_mb": peak_rss_mb(),
        "rss_after_build_mb": rss_mb(),
        "cold_build_s": round(took, 2),
    }


def section_memory(cfg: Config) -> dict[str, Any]:
    out = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            "build_rss",
            str(cfg.memory_pool),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def run(
    cfg: Config,
    *,
    sections: Sequence[str] = SECTIONS,
    out: Path | None = ROOT / "bench" / "results.json",
    doc: Path | None = ROOT / "docs" / "performance.md",
    log: Callable[[str], None] = _log,
) -> dict[str, Any]:
    """Run the *sections* at the sizes of *cfg*; write *out* and regenerate *doc*."""
    from ctxledger.adapters.tokens import default_counter

    began = time.perf_counter()
    results: dict[str, Any] = {"config": dataclasses.asdict(cfg), "machine": machine()}
    with tempfile.TemporaryDirectory(prefix="ctxledger-bench-") as tmpdir:
        tmp = Path(tmpdir)
        template: list[Any] = []
        if {"ledger", "scale", "postgres"} & set(sections):
            t0 = time.perf_counter()
            template = make_template(cfg.template_agents, cfg.template_turns)
            results["template"] = {
                "agents": cfg.template_agents,
                "turns": cfg.template_turns,
                "events": len(template),
                "seconds": round(time.perf_counter() - t0, 1),
            }
            log(f"template: {results['template']}")
        steps: list[tuple[str, Callable[[], Any]]] = [
            ("turn", lambda: run_turns(cfg.turn_sizes, session_turns=cfg.session_turns,
                                       repeat=cfg.repeat, max_seconds=cfg.max_seconds, log=log)),
            ("build", lambda: run_build_latency(cfg.sizes, cfg.engine_sizes, repeat=cfg.repeat, max_seconds=cfg.max_seconds)),
            ("ledger", lambda: section_ledger(cfg, template, tmp)),
            ("scale", lambda: section_scale(cfg, template, tmp)),
            ("postgres", lambda: run_postgres(iter([_rows(template, cfg.pg_events)]))),
            ("growth", lambda: run_growth(cfg.growth_turns)),
            ("peers", lambda: run_peers(
                sorted(p for p in TRAJECTORIES.glob("*") if p.suffix != ".md") if cfg.trajectories and TRAJECTORIES.is_dir() else [],
                long_steps=cfg.long_steps, budget=cfg.peer_budget, counter=default_counter(),
                openhands=cfg.openhands)),
            ("memory", lambda: section_memory(cfg)),
            ("secrets", lambda: run_secret_scan_cost(
                cfg.secret_kib, repeat=min(cfg.repeat, 3),
                trajectories=sorted(p for p in TRAJECTORIES.glob("*") if p.suffix != ".md") if cfg.trajectories and TRAJECTORIES.is_dir() else [])),
            ("encryption", lambda: run_encryption_cost(cfg.encryption_items, repeat=min(cfg.repeat, 3))),
        ]  # fmt: skip
        for name, fn in steps:
            if name not in sections:
                continue
            t0 = time.perf_counter()
            log(f"{name} …")
            try:
                results[name] = fn()
            except Exception as exc:  # a failing section is reported, the others still run
                results[name] = {"error": f"{type(exc).__name__}: {exc}"}
            results.setdefault("seconds", {})[name] = round(time.perf_counter() - t0, 1)
            log(f"{name} done in {results['seconds'][name]} s")
    results["machine"]["load_after"] = [round(x, 2) for x in os.getloadavg()]
    results["total_seconds"] = round(time.perf_counter() - began, 1)
    results["targets"] = report.targets(results)
    if out is not None:
        tmp_out = out.with_suffix(".json.tmp")
        tmp_out.write_text(json.dumps(results, indent=1, sort_keys=False) + "\n", encoding="utf-8")
        tmp_out.replace(out)
    if doc is not None:
        report.update_doc(doc, results)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument(
        "--only", default="", help=f"comma-separated sections of {','.join(SECTIONS)}"
    )
    parser.add_argument(
        "--docs",
        action="store_true",
        help="write bench/results.json and regenerate docs/performance.md (make bench-docs)",
    )
    parser.add_argument(
        "--out", default="", help="results file (default: a temporary file; --docs: bench/)"
    )
    parser.add_argument(
        "--render", action="store_true", help="only regenerate docs/performance.md from --out"
    )
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        kind, *rest = args.child
        if kind == "replay":
            print(json.dumps(child_replay(rest[0], rest[1])))
        elif kind == "build_rss":
            print(json.dumps(child_build_rss(int(rest[0]))))
        else:
            parser.error(f"unknown child {kind!r}")
        return 0
    committed = ROOT / "bench" / "results.json"
    if args.render:
        stored = json.loads(Path(args.out or committed).read_text(encoding="utf-8"))
        report.update_doc(ROOT / "docs" / "performance.md", stored)
        return 0
    sections = tuple(s for s in args.only.split(",") if s) or SECTIONS
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown:
        parser.error(f"unknown sections {unknown}; choose from {', '.join(SECTIONS)}")
    cfg = QUICK if args.quick else FULL
    # Only --docs writes into the checkout (the committed figures and docs/performance.md).
    docs = args.docs and not args.quick
    doc = ROOT / "docs" / "performance.md" if docs else None
    default_out = (
        committed if docs else Path(tempfile.gettempdir()) / f"ctxledger-bench-{cfg.name}.json"
    )
    out = Path(args.out) if args.out else default_out
    results = run(cfg, sections=sections, out=out, doc=doc)
    _log(f"wrote {out}{' and ' + str(doc) if doc else ''} in {results['total_seconds']} s")
    failed = [n for n in sections if isinstance(results.get(n), dict) and "error" in results[n]]
    for n in failed:
        _log(f"section {n} failed: {results[n]['error']}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
