"""``ctxledger simulate`` and ``ctxledger compare``: replay recorded agent runs through the engine."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from ctxledger.adapters.cli.options import EncryptOpt, JsonOpt
from ctxledger.adapters.cli.tables import cli_console, show, shown, visible
from ctxledger.domain.errors import CtxLedgerError

if TYPE_CHECKING:  # the engine and importers load when a command runs
    from ctxledger.adapters.simulation.simulate import SimulationReport

__all__ = ["COMPARE_LEGEND", "compare", "compare_table", "simulate"]

PathArg = Annotated[
    Path, typer.Argument(help="Trajectory file (.traj, .traj.json, OpenHands JSON).")
]
FormatOpt = Annotated[
    str,
    typer.Option("--format", help="auto, swe-agent, mini-swe-agent or openhands."),
]
WindowOpt = Annotated[
    int | None,
    typer.Option(
        "--window",
        help="Model window in tokens: a larger prompt fails with a context-limit error.",
    ),
]
StoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store",
        envvar="CTXLEDGER_STORE",
        help="Ledger URL (default: a new temporary SQLite file).",
    ),
]

WatermarkOpt = Annotated[
    float | None,
    typer.Option(
        "--watermark",
        help="Rebuild target as a fraction of the budget, in (0, 0.9] (default: the engine's).",
    ),
]

_WIDE = 210


def _write_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def _progress_wanted() -> bool:
    return sys.stderr.isatty()


def simulate(
    path: PathArg,
    *,
    format: FormatOpt = "auto",
    budget: Annotated[int, typer.Option("--budget", help="Token budget of every prompt.")] = 8000,
    window: WindowOpt = None,
    strategy: Annotated[
        str, typer.Option("--strategy", help="Packing strategy (see `ctxledger compare`).")
    ] = "variable",
    store: StoreOpt = None,
    as_json: JsonOpt = False,
    encrypt: EncryptOpt = None,
    watermark: WatermarkOpt = None,
    allow_foreign_db: Annotated[
        bool,
        typer.Option(
            "--allow-foreign-db",
            help="Write the ledger's tables into an existing SQLite database of another "
            "application (refused without it).",
        ),
    ] = False,
) -> None:
    """Replay a recorded agent run turn by turn through one engine and measure its prompts."""
    from ctxledger.adapters.simulation.simulate import simulate as run_simulate

    report = run_simulate(
        path,
        format=format,
        budget=budget,
        window=window,
        strategy=strategy,
        store_url=store,
        progress=_progress_wanted(),
        encrypt=encrypt,
        watermark=watermark,
        allow_foreign=allow_foreign_db,
    )
    if as_json:
        _write_json(report.to_dict())
        return
    console = cli_console()
    table = Table(title=shown(f"simulate · {report.format} · {Path(report.trajectory).name}"))
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in _human_rows(report):
        table.add_row(shown(key), shown(value))
    show(console, table)
    store = visible(report.store, None)
    console.print(f"store: {store}", soft_wrap=True)
    console.print(f"next: ctxledger replay --store {store} --verify", soft_wrap=True)


def _human_rows(r: SimulationReport) -> list[tuple[str, str]]:
    t = r.prompt_tokens
    return [
        ("strategy", r.strategy),
        ("budget / window", f"{r.budget} / {r.window if r.window else '—'}"),
        ("rebuild watermark", f"{r.watermark:g}"),
        ("tokenizer", r.tokenizer),
        ("steps / prompts / rejected", f"{r.steps} / {r.prompts} / {r.rejected_prompts}"),
        ("generations (refresh, rebuild)", f"{r.generations} ({r.refreshes}, {r.rebuilds})"),
        ("prompt tokens max / mean / p95", f"{t.max} / {t.mean:.0f} / {t.p95}"),
        ("over-budget prompts", str(r.over_budget_prompts)),
        ("overflow prompts", str(r.overflow_prompts)),
        ("pinned dropped", str(r.pinned_dropped)),
        ("objective present", _pct(r.objective_present)),
        ("latest observation present", _pct(r.latest_observation_present)),
        (
            "latest observation kept (mean / min)",
            f"{_pct(r.latest_observation_kept_fraction.mean)} / "
            f"{_pct(r.latest_observation_kept_fraction.min)}"
            if r.latest_observation_kept_fraction
            else "—",
        ),
        ("recent failures present", _pct(r.recent_failures_present)),
        (
            "next-action recall (pooled / turn min)",
            f"{_pct(r.next_action_recall.pooled)} / {_pct(r.next_action_recall.min)}"
            f" ({r.next_action_recall.hits} of {r.next_action_recall.needed})",
        ),
        ("role instructions whole", _pct(r.instructions_whole)),
        (
            "order inversions / observation before action",
            f"{r.order_inversions} / {r.observation_before_action}",
        ),
        ("stale failures share", _pct(r.stale_failures_share)),
        ("eviction regret", _pct(r.eviction_regret)),
        ("prefix reuse (limit)", f"{_pct(r.prefix_reuse)} ({_pct(r.prefix_reuse_limit)})"),
        ("prefix reuse within generation", _pct(r.prefix_reuse_within_generation)),
        ("static prefix changes", str(r.static_prefix_changes)),
        ("expected cached tokens", str(r.expected_cached_tokens)),
        ("events", str(r.events)),
    ]


def compare(
    path: PathArg,
    *,
    budget: Annotated[int, typer.Option("--budget", help="Token budget of every prompt.")],
    strategies: Annotated[
        str, typer.Option("--strategies", help="Comma-separated strategy names.")
    ],
    window: WindowOpt = None,
    format: FormatOpt = "auto",
    store: StoreOpt = None,
    as_json: JsonOpt = False,
    watermark: WatermarkOpt = None,
) -> None:
    """The same recorded run through several strategies: one row per strategy (a strategy
    whose run fails gets a row saying why; the others still run)."""
    from ctxledger.adapters.simulation.simulate import compare as run_compare

    failed: dict[str, str] = {}
    reports = run_compare(
        path,
        budget,
        window,
        strategies.split(","),
        format=format,
        store_url=store,
        progress=_progress_wanted(),
        on_failure=lambda name, exc: failed.__setitem__(name, str(exc)),
        watermark=watermark,
    )
    if not reports:
        first_name, why = next(iter(failed.items()))
        raise CtxLedgerError(f"every strategy failed; {first_name}: {why}")
    first = reports[0]
    if as_json:
        _write_json(
            {
                "trajectory": first.trajectory,
                "format": first.format,
                "steps": first.steps,
                "budget": budget,
                "window": window,
                "store": first.store,
                "rows": [r.to_dict() for r in reports],
                "failed": failed,
            }
        )
        return
    console = Console(width=max(Console().width, _WIDE), markup=False, highlight=False, emoji=False)
    show(console, compare_table(reports, failed))
    console.print(COMPARE_LEGEND, soft_wrap=True)
    console.print(f"store: {visible(first.store, None)}", soft_wrap=True)


COMPARE_LEGEND = (
    "gens: generations (refreshes/rebuilds) · tok: prompt tokens · over: over-budget prompts · "
    "ovfl: overflow prompts · pin-drop: pinned dropped · objective/latest/fails: objective, "
    "latest observation, recent failures present · recall: next-action recall · instr: role "
    "instructions whole · order: order inversions/observations before their action · stale: "
    "stale failures share · reuse/limit/in-gen: prefix reuse, its "
    "append-only limit, within generations · static: static prefix changes · cached: expected "
    "cached tokens"
)


def compare_table(
    reports: Sequence[SimulationReport], failed: Mapping[str, str] | None = None
) -> Table:
    """The human table of ``compare``: one row per strategy (a failed one says why)."""
    first = reports[0]
    window = f" · window {first.window}" if first.window else ""
    table = Table(
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        title=shown(
            f"compare · {first.format} · {Path(first.trajectory).name} · "
            f"{first.steps} steps · budget {first.budget}{window}"
        ),
    )
    columns = (
        "strategy", "gens(rf/rb)", "tok max/mean/p95", "over", "ovfl", "pin-drop", "objective",
        "latest", "fails", "recall", "instr", "order", "stale", "reuse", "limit", "in-gen",
        "static", "cached", "events",
    )  # fmt: skip
    rows = [
        (
            visible(r.strategy),
            f"{r.generations} ({r.refreshes}/{r.rebuilds})",
            f"{r.prompt_tokens.max}/{r.prompt_tokens.mean:.0f}/{r.prompt_tokens.p95}",
            str(r.over_budget_prompts),
            str(r.overflow_prompts),
            str(r.pinned_dropped),
            _pct(r.objective_present),
            _pct(r.latest_observation_present),
            _pct(r.recent_failures_present),
            _pct(r.next_action_recall.pooled),
            _pct(r.instructions_whole),
            f"{r.order_inversions}/{r.observation_before_action}",
            _pct(r.stale_failures_share),
            _pct(r.prefix_reuse),
            _pct(r.prefix_reuse_limit),
            _pct(r.prefix_reuse_within_generation),
            str(r.static_prefix_changes),
            str(r.expected_cached_tokens),
            str(r.events),
        )
        for r in reports
    ]
    for n, col in enumerate(columns):
        table.add_column(col, justify="left" if n == 0 else "right", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    for name, why in (failed or {}).items():
        table.add_row(shown(name), shown(f"failed: {why}"), *([""] * (len(columns) - 2)))
    return table
