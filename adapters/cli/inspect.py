"""CLI commands that read the ledger: inspect, generations, diff, audit."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import msgspec
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

from ctxledger.adapters.cli.options import JsonOpt, StoreOpt
from ctxledger.adapters.cli.tables import cli_console, show, shown, visible
from ctxledger.adapters.ledger import QUARANTINE_TABLE, Ledger, Quarantined, open_ledger
from ctxledger.adapters.ledger.doctor import loss_of, snapshots_differing
from ctxledger.adapters.ledger.projection_runner import ProjectionRunner
from ctxledger.adapters.ledger.published_heads import (
    compare_heads,
    load_published,
    signed_heads,
    wanted_links,
)
from ctxledger.domain.chain import ChainCheck
from ctxledger.domain.errors import CtxLedgerError, UnknownAgentError
from ctxledger.projections.audit import Violation
from ctxledger.projections.audit import audit as audit_records
from ctxledger.projections.catalog import PROJECTIONS, ReadModels
from ctxledger.projections.generations import Generations
from ctxledger.projections.inspector import ContextView, ItemView, diff_generations, inspect_agent

if TYPE_CHECKING:  # re-deriving (and its tokenizer) loads with `audit --rederive`
    from ctxledger.adapters.engine.rederive import RederiveReport

__all__ = ["AuditFailedError", "audit", "diff", "generations", "inspect", "read_states"]

console = cli_console()

AgentOpt = Annotated[str, typer.Option("--agent", help="Agent id.")]


class AuditFailedError(CtxLedgerError):
    """The audit found violations."""


def _json(obj: Any) -> None:
    sys.stdout.write(json.dumps(msgspec.to_builtins(obj), sort_keys=True) + "\n")


def read_states(ledger: Ledger) -> ReadModels:
    """The read models as of the end of the log (persisted ones plus the tail folded)."""
    runner = ProjectionRunner(ledger)
    runner.catch_up()
    return runner.models


def _default_agent(states: ReadModels, agent: str) -> str:
    if agent:
        return agent
    gens: Generations = states.generations
    if not gens.by_agent:
        raise UnknownAgentError("the ledger has no agents")
    return next(iter(gens.by_agent))


def _items_table(title: str, rows: tuple[ItemView, ...], *, excluded: bool = False) -> Table:
    t = Table(title=title, title_justify="left")
    t.add_column("id", no_wrap=True)  # whole, so it can be copied into `control`
    for col in ("layer", "source", "tokens", "fate", "flags", "files", "preview"):
        t.add_column(col, overflow="fold")
    for v in rows:
        flags = " ".join(
            f
            for f, on in (
                ("pinned", v.pinned),
                ("mandatory", v.mandatory),
                ("verified", v.verified),
            )
            if on
        )
        fate = f"{v.action}: {v.reason}" if excluded or v.reason else v.action
        if v.method:
            fate += f" [{v.method} {v.tokens_before}→{v.tokens}]"
        t.add_row(  # recorded text is data: "[erased: …]" or "[/INST]" in a log is not markup
            shown(v.id),
            shown(v.layer),
            shown(v.source),
            str(v.tokens if not excluded else v.tokens_before),
            shown(fate),
            flags,
            shown(", ".join(v.files[:3])),
            shown(v.preview, 60),
        )
    return t


def print_view(view: ContextView) -> None:
    a = view.agent
    console.print(
        Text.assemble(
            (visible(a.agent_id), "bold"),
            f" · role {visible(a.role)} · task {visible(a.task or '—')} · "
            f"generation {view.generation} of {view.generations} ({visible(view.kind)}"
            f"{': ' + visible(view.reason) if view.reason else ''})",
        )
    )
    bar_width = 40
    filled = min(bar_width, round(bar_width * view.utilization)) if view.budget else 0
    console.print(
        Text.assemble(
            f"usage  [{'█' * filled}{'·' * (bar_width - filled)}] {view.used}/{view.budget} "
            f"tokens ({view.utilization:.0%}) · strategy {visible(view.strategy)} · "
            f"builds {view.builds}",
            (f" · overflow {view.overflow}" if view.overflow else "", "red"),
        )
    )
    cfg = view.settings
    console.print(
        Text.assemble(
            f"settings · strategy {visible(cfg.strategy)} · budget "
            f"{cfg.budget or view.agent.budget} · watermark {cfg.watermark} · recall "
            f"{'on' if cfg.recall else 'off'} · latest step "
            f"{'kept' if cfg.latest_step else 'not forced'}",
            (f" · building {visible(str(view.building))}" if view.building else "", "yellow"),
        )
    )
    comp = Table(title="composition (tokens)", title_justify="left")
    comp.add_column("by layer")
    comp.add_column("tokens", justify="right")
    comp.add_column("by source")
    comp.add_column("tokens", justify="right")
    layers = list(view.by_layer.items())
    sources = list(view.by_source.items())
    for i in range(max(len(layers), len(sources))):
        lk, lv = layers[i] if i < len(layers) else ("", "")
        sk, sv = sources[i] if i < len(sources) else ("", "")
        comp.add_row(shown(lk), str(lv), shown(sk), str(sv))
    show(console, comp)
    show(console, _items_table(f"included ({len(view.included)})", view.included))
    show(console, _items_table(f"excluded ({len(view.excluded)})", view.excluded, excluded=True))
    if view.gc:
        console.print(
            "GC indicators (none refreshes by itself): "
            + visible(", ".join(f"{k} {v}" for k, v in view.gc.items()), None)
        )
    if view.recall:
        console.print(f"recall group: {visible(str(view.recall))}")
    if view.last_turn_error:
        console.print(f"last turn error: {visible(view.last_turn_error)}")
    if view.controls:
        ctl = Table(title="manual controls and generation changes", title_justify="left")
        for col in ("at", "control", "target", "detail"):
            ctl.add_column(col, overflow="fold")
        for c in view.controls[-15:]:
            ctl.add_row(
                c.at.isoformat(timespec="seconds"), shown(c.kind), shown(c.target), shown(c.detail)
            )
        show(console, ctl)


def inspect(
    store: StoreOpt,
    agent: Annotated[str, typer.Option("--agent", help="Agent id (default: the first).")] = "",
    generation: Annotated[
        int | None, typer.Option("--generation", help="Generation number (default: current).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """The Context view: usage vs budget, included and excluded items with reasons."""
    with open_ledger(store, read_only=True) as ledger:
        states = read_states(ledger)
    view = inspect_agent(states, _default_agent(states, agent), generation)
    if as_json:
        _json(view)
    else:
        print_view(view)


def generations(store: StoreOpt, agent: AgentOpt, as_json: JsonOpt = False) -> None:
    """Every generation of an agent with the reason for each rebuild or refresh."""
    with open_ledger(store, read_only=True) as ledger:
        states = read_states(ledger)
    gens: Generations = states.generations
    ag = gens.by_agent.get(agent)
    if ag is None:
        raise UnknownAgentError(f"unknown agent {agent[:80]!r}")
    rows = [
        {
            "number": g.number,
            "kind": g.kind,
            "trigger": g.trigger,
            "reason": g.reason,
            "strategy": g.strategy,
            "budget": g.budget,
            "tokens_used": g.tokens_used,
            "overflow": g.overflow,
            "builds": g.builds,
            "included": len(g.included),
            "dropped": len(g.dropped),
        }
        for g in ag.generations
    ]
    if as_json:
        _json({"agent": agent, "generations": rows})
        return
    t = Table(title=shown(f"generations of {agent}"))
    for col in (
        "gen",
        "kind",
        "reason",
        "strategy",
        "tokens/budget",
        "builds",
        "included",
        "dropped",
    ):
        t.add_column(col, overflow="fold")
    for r in rows:
        t.add_row(
            str(r["number"]),
            shown(r["kind"]),
            shown(r["reason"] or "—"),
            shown(r["strategy"]),
            f"{r['tokens_used']}/{r['budget']}",
            str(r["builds"]),
            str(r["included"]),
            str(r["dropped"]),
        )
    show(console, t)


def diff(
    store: StoreOpt,
    agent: AgentOpt,
    from_generation: Annotated[int, typer.Argument(metavar="FROM")],
    to_generation: Annotated[int, typer.Argument(metavar="TO")],
    as_json: JsonOpt = False,
) -> None:
    """What entered, left, was compressed or clipped between two generations, and why."""
    with open_ledger(store, read_only=True) as ledger:
        states = read_states(ledger)
    d = diff_generations(states, agent, from_generation, to_generation)
    if as_json:
        _json(d)
        return
    console.print(
        Text.assemble(
            (visible(agent), "bold"),
            f" generation {d.from_generation} → {d.to_generation}: "
            f"{d.tokens_from} → {d.tokens_to} tokens",
        )
    )
    for r in d.reasons:
        console.print(f"  {visible(r)}")
    for title, rows in (
        ("entered", d.entered),
        ("left", d.left),
        ("compressed", d.compressed),
        ("clipped", d.clipped),
    ):
        show(console, _items_table(f"{title} ({len(rows)})", rows, excluded=title == "left"))


RederiveOpt = Annotated[
    bool,
    typer.Option(
        "--rederive",
        help="Also re-run the planner for every recorded build and compare its selection.",
    ),
]


HeadsOpt = Annotated[
    bool,
    typer.Option(
        "--heads",
        help="Also print every stream's head (last version and link; signed on a keyed chain): "
        "publish them to anchor the hash chains against a rewrite of the whole file.",
    ),
]

AgainstOpt = Annotated[
    Path | None,
    typer.Option(
        "--against",
        help="Compare with stream heads published earlier (the JSON of audit --heads --json): "
        "every stream still there, at least as long, with the same link at that version.",
    ),
]


def _tamper_violations(
    chains: ChainCheck, explained: frozenset[int] = frozenset()
) -> list[Violation]:
    return [
        Violation(
            position=t.position,
            rule=t.kind if t.kind == "agent_mismatch" else f"chain_{t.kind}",
            detail=f"{t.stream_id} v{t.version}: {t.detail}",
        )
        for t in chains.tampered
        if t.position not in explained
    ]


_FOLLOWS = re.compile(r"version (\d+) follows (\d+)")


def _quarantine_violations(
    chains: ChainCheck, quarantined: list[Quarantined]
) -> tuple[list[Violation], frozenset[int]]:
    """A ``quarantined`` violation per row moved aside by ``doctor --quarantine``, and a
    ``quarantine_gap`` for each chain break whose missing versions are all quarantined (the
    positions of those breaks are returned: they are explained, not tampering)."""
    by_stream: dict[str, dict[int, int]] = {}
    found = []
    for q in quarantined:
        by_stream.setdefault(q.stream_id, {})[q.version] = q.position
        found.append(
            Violation(
                position=q.position,
                rule="quarantined",
                detail=f"{q.stream_id} v{q.version} ({q.topic or 'no topic'}): {q.kind}: "
                f"{q.reason}; moved to {QUARANTINE_TABLE} at {q.at}",
            )
        )
    explained: set[int] = set()
    for t in chains.tampered:
        held = by_stream.get(t.stream_id)
        match = _FOLLOWS.fullmatch(t.detail) if t.kind == "version_gap" and held else None
        if held is None or match is None:
            continue
        missing = range(int(match.group(2)) + 1, int(match.group(1)))
        if missing and all(v in held for v in missing):
            explained.add(t.position)
            found.append(
                Violation(
                    position=t.position,
                    rule="quarantine_gap",
                    detail=f"{t.stream_id} v{t.version}: {t.detail}: explained by quarantine "
                    f"(positions {', '.join(str(held[v]) for v in missing)})",
                )
            )
    return found, frozenset(explained)


def audit(
    store: StoreOpt,
    as_json: JsonOpt = False,
    rederive_builds: RederiveOpt = False,
    heads: HeadsOpt = False,
    against: AgainstOpt = None,
) -> None:
    """Replay the whole log and check every invariant and every stream's hash chain; exit 1
    listing each violation."""
    published = load_published(against) if against is not None else {}
    with open_ledger(store, read_only=True) as ledger:
        records = [(r.position, r.event) for r in ledger.read_all()]
        key, links = ledger.chain_key, ledger.links_checkable
        chains = ChainCheck(key=key, links=links, wanted=wanted_links(published))
        chains.feed(ledger.stored_rows())
        quarantined = ledger.quarantined()
        lost = loss_of(ledger)
        forged = ledger.snapshot_forged([p.name for p in PROJECTIONS])
        differing = snapshots_differing(ledger) if not forged else []
        report = _rederive(ledger, len(records), quiet=as_json) if rederive_builds else None
    held, explained = _quarantine_violations(chains, quarantined)
    tampered = _tamper_violations(chains, explained)
    loss = [Violation(position=lost.end + 1, rule="loss", detail=lost.line)] if lost else []
    snapshots = _snapshot_violations(forged, differing)
    compared = compare_heads(published, chains, key, links=links)
    violations = sorted(
        [*audit_records(records), *tampered, *held, *loss, *snapshots, *compared],
        key=lambda v: v.position,
    )
    chain_summary: dict[str, Any] = {
        "chains": len(chains.streams),
        "tampered": [msgspec.structs.asdict(v) for v in tampered],
        "legacy_events": chains.legacy_events,
        "quarantined": [q.position for q in quarantined],
        "keyed": ledger.keyring.chain_keyed,
        "links_checked": links,
        "keyless_erasures": chains.keyless,
    }
    if heads:
        chain_summary["heads"] = signed_heads(chains, key)
    if as_json:
        _json(_audit_json(len(records), violations, report, chain_summary))
    else:
        _print_audit(len(records), violations, report)
        _print_chains(
            chains, show_heads=heads, explained=len(explained), keyed=ledger.keyring.chain_keyed
        )
    _fail_on(violations, report)


def _snapshot_violations(forged: list[str], differing: list[str]) -> list[Violation]:
    """Saved read models refused by their MAC, or differing from a replay of the log."""
    return [
        Violation(
            position=0,
            rule="snapshot_forged",
            detail=f"the saved read model {name!r} does not match its MAC (refused: rebuilt "
            "from the log)",
        )
        for name in forged
    ] + [
        Violation(
            position=0,
            rule="snapshot_differs",
            detail=f"the saved read model {name!r} differs from a replay of the log up to its "
            "position (edited behind the ledger's back; `ctxledger replay` rebuilds it)",
        )
        for name in differing
    ]


def _audit_json(
    events: int,
    violations: list[Violation],
    report: RederiveReport | None,
    chain_summary: dict[str, Any],
) -> dict[str, Any]:
    """``audit --json``: the violations, the chains and (``--rederive``) the re-derivation."""
    if report is None:
        return {
            "events": events,
            "violations": violations,
            "clean": not violations,
            **chain_summary,
        }
    return {
        "events": events,
        "violations": violations,
        "clean": not violations and not report.mismatches,
        "builds": report.builds,
        "rederived": report.rederived,
        "mismatches": report.mismatches,
        "not_rederivable": report.not_rederivable,
        "mismatch_details": report.mismatch_details,
        "not_rederivable_reasons": report.not_rederivable_reasons,
        **chain_summary,
    }


def _fail_on(violations: list[Violation], report: RederiveReport | None) -> None:
    """Exit 1 (one line naming the first) on any violation or re-derivation mismatch."""
    if violations:
        first = violations[0]
        raise AuditFailedError(
            f"{len(violations)} violations; first at position {first.position}: "
            f"{first.rule} {first.detail}".strip()
        )
    if report is not None and report.mismatches:
        m = report.mismatch_details[0]
        raise AuditFailedError(
            f"{report.mismatches} builds re-derive differently; first: agent {m.agent_id} "
            f"generation {m.generation} ({m.pack_id}): {m.first_difference}"
        )


def _print_chains(
    chains: ChainCheck, *, show_heads: bool, explained: int = 0, keyed: bool = False
) -> None:
    broken = len({t.stream_id for t in chains.tampered if t.kind != "agent_mismatch"})
    kind = "keyed hash chains (HMAC)" if keyed else "hash chains"
    line = f"{kind}: {len(chains.streams)} streams, {broken} broken"
    if not chains.links:
        line += " · links not checked: keyed, and no master key configured"
    if explained:
        line += f" ({explained} breaks explained by quarantined rows)"
    if chains.legacy_events:
        line += f" · {chains.legacy_events} events predate the chain (not linked)"
    console.print(line)
    if show_heads:
        t = Table(title="stream heads (publish these to anchor the chains)")
        for col in ("stream", "version", "link"):
            t.add_column(col, overflow="fold")
        for sid, (version, head) in chains.heads.items():
            t.add_row(shown(sid), str(version), shown(head))
        show(console, t)


def _rederive(ledger: Ledger, total: int, *, quiet: bool) -> RederiveReport:
    from ctxledger.adapters.engine.rederive import rederive

    if quiet or not sys.stderr.isatty():  # no bar at all: a disabled one still writes a
        # blank line to stderr on some rich releases (13.8), ahead of the error line
        return rederive(ledger.read_all(), erased=ledger.keyring.erased())
    with Progress(
        TextColumn("re-deriving builds"),
        BarColumn(),
        MofNCompleteColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task("events", total=total)
        return rederive(
            ledger.read_all(),
            on_event=lambda _pos: bar.advance(task),
            erased=ledger.keyring.erased(),
        )


def _print_audit(events: int, violations: list[Violation], report: RederiveReport | None) -> None:
    if not violations:
        console.print(f"audit clean · {events} events")
    else:
        t = Table(title=f"audit · {len(violations)} violations")
        for col in ("position", "rule", "agent", "detail"):
            t.add_column(col, overflow="fold")
        for v in violations:
            t.add_row(str(v.position), shown(v.rule), shown(v.agent_id), shown(v.detail))
        show(console, t)
    if report is None:
        return
    console.print(
        f"re-derived {report.rederived} of {report.builds} builds · "
        f"{report.mismatches} mismatches · {report.not_rederivable} not re-derivable"
    )
    for why, n in sorted(report.not_rederivable_reasons.items()):
        console.print(f"  not re-derivable: {n} × {visible(why)}")
    if report.mismatch_details:
        t = Table(title="builds that re-derive differently")
        for col in ("position", "agent", "generation", "first differing decision"):
            t.add_column(col, overflow="fold")
        for m in report.mismatch_details:
            t.add_row(
                str(m.position), shown(m.agent_id), str(m.generation), shown(m.first_difference)
            )
        show(console, t)
