"""The ``ctxledger`` command line (typer + rich): tables for people, ``--json`` for machines."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from ctxledger.adapters import cli_control, cli_inspect, cli_serve, cli_simulate
from ctxledger.adapters.cli_memory import memory_app
from ctxledger.adapters.ledger import open_ledger
from ctxledger.adapters.projection_runner import ProjectionRunner, encode_state, replay_states
from ctxledger.domain.errors import CtxLedgerError

__all__ = ["app", "main"]

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="ctxledger: the event-sourced context engine for LLM coding agents.",
)
console = Console()

StoreOpt = Annotated[
    str, typer.Option("--store", help="Ledger URL: memory://, sqlite:///path, postgresql://…")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object for machines.")]


class CommandError(CtxLedgerError):
    """A command that ran but found something wrong (e.g. replay mismatch)."""


def _print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")


@app.command()
def replay(
    store: StoreOpt,
    verify: Annotated[
        bool, typer.Option("--verify", help="Compare replay with the persisted read models.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Rebuild every read model from the whole log (and with --verify, compare)."""
    with open_ledger(store, must_exist=True) as ledger:
        runner = ProjectionRunner(ledger)
        persisted_position = runner.position
        if not verify:
            states, count, last = replay_states(ledger)
            runner.states, runner.position = states, last
            runner.save()
            if as_json:
                _print_json({"events": count, "position": last, "rebuilt": sorted(states)})
            else:
                console.print(f"replayed {count} events; rebuilt {', '.join(sorted(states))}")
            return
        states, count, _ = replay_states(ledger, upto=persisted_position)
        total = ledger.max_position()
        result: dict[str, Any] = {"events": count, "projections": {}, "equal": True}
        for name, state in states.items():
            persisted = runner.states.get(name)
            equal = persisted is not None and encode_state(state) == encode_state(persisted)
            result["projections"][name] = {"equal": equal}
            result["equal"] = result["equal"] and equal
        behind = total - persisted_position
        result["behind"] = behind
        if persisted_position == 0 and total > 0:
            result["equal"] = False
            reason = "no persisted read models (run `ctxledger replay` to build them)"
        elif not result["equal"]:
            bad = [n for n, v in result["projections"].items() if not v["equal"]]
            reason = f"replay differs from persisted read models: {', '.join(bad)}"
        else:
            reason = ""
        if as_json:
            _print_json(result)
        else:
            table = Table(title=f"replay --verify · {count} events")
            table.add_column("projection")
            table.add_column("equal")
            for name, v in result["projections"].items():
                table.add_row(name, "yes" if v["equal"] else "NO")
            console.print(table)
            if behind:
                console.print(f"persisted read models are {behind} events behind the log")
        if not result["equal"]:
            raise CommandError(reason)


@app.command()
def demo(
    path: Annotated[Path, typer.Option("--path", help="Where to write the demo ledger.")] = Path(
        ".ctxledger/demo.db"
    ),
    as_json: JsonOpt = False,
) -> None:
    """Run the scripted demo session into a fresh SQLite ledger and show the result."""
    from ctxledger.adapters.demo import run_demo

    run_demo(path, console=console, as_json=as_json)


app.command()(cli_inspect.inspect)
app.command()(cli_inspect.generations)
app.command()(cli_inspect.diff)
app.command()(cli_inspect.audit)
app.add_typer(memory_app, name="memory")
app.command()(cli_simulate.simulate)
app.command()(cli_simulate.compare)
app.command()(cli_serve.serve)
app.command()(cli_control.control)
app.command()(cli_control.configure)


def main(argv: list[str] | None = None) -> int:
    """Console entry point: typed errors become one line on stderr and a non-zero exit."""
    try:
        app(args=argv, standalone_mode=False)
    except CtxLedgerError as exc:
        sys.stderr.write(f"ctxledger: error: {exc}\n")
        return exc.exit_code
    except (typer.Abort, KeyboardInterrupt):
        sys.stderr.write("ctxledger: aborted\n")
        return 130
    except typer.Exit as exc:
        return int(exc.exit_code or 0)
    except Exception as exc:  # click usage errors arrive here in non-standalone mode
        import click

        if isinstance(exc, click.ClickException):
            sys.stderr.write(f"ctxledger: error: {exc.format_message()}\n")
            return exc.exit_code
        raise
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
