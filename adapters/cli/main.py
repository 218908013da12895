"""The ``ctxledger`` command line (typer + rich): tables for people, ``--json`` for machines."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from ctxledger.adapters.cli import api as cli_api
from ctxledger.adapters.cli import control as cli_control
from ctxledger.adapters.cli import doctor as cli_doctor
from ctxledger.adapters.cli import erase as cli_erase
from ctxledger.adapters.cli import inspect as cli_inspect
from ctxledger.adapters.cli import serve as cli_serve
from ctxledger.adapters.cli import simulate as cli_simulate
from ctxledger.adapters.cli.memory import memory_app
from ctxledger.adapters.cli.options import EncryptOpt, JsonOpt, StoreOpt
from ctxledger.adapters.cli.tables import cli_console, show, shown, visible
from ctxledger.adapters.ledger import open_ledger
from ctxledger.adapters.ledger.doctor import loss_of
from ctxledger.adapters.ledger.projection_runner import (
    ProjectionRunner,
    encode_state,
    replay_states,
)
from ctxledger.adapters.logs import LogLevel, configure_logging
from ctxledger.adapters.security.content_seal import KEY_FILE_ENV, read_key_file
from ctxledger.domain.errors import CtxLedgerError, DecodeError

__all__ = ["app", "main"]

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="ctxledger: the event-sourced context engine for LLM coding agents.",
)
console = cli_console()

DAMAGE_HINT = " (`ctxledger doctor` lists every damaged row; --quarantine sets them aside)"
"""Appended to the line of a stored row that does not decode."""
ERROR_LIMIT = 2000
"""Characters of an error line shown (the rest is named by a marker)."""
DEBUG_ENV = "CTXLEDGER_DEBUG"
"""Set to show the traceback of an unexpected failure instead of its one line."""


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
    with open_ledger(store, must_exist=True, read_only=verify) as ledger:
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
        # A store left by a killed writer lags the log: fold the tail into the persisted
        # models (in memory; verifying writes nothing), then compare with a full replay.
        behind = ledger.max_position() - persisted_position
        caught_up = runner.catch_up()
        states, count, _ = replay_states(ledger, upto=runner.position)
        result: dict[str, Any] = {
            "events": count,
            "projections": {},
            "equal": True,
            "behind": behind,
            "caught_up": caught_up,
        }
        for name, state in states.items():
            persisted = runner.states.get(name)
            equal = persisted is not None and encode_state(state) == encode_state(persisted)
            result["projections"][name] = {"equal": equal}
            result["equal"] = result["equal"] and equal
        if runner.ahead:  # saved past the end of the log: events were lost, never "equal"
            result["ahead"] = runner.ahead
            result["equal"] = False
        lost = loss_of(ledger)  # the same verdict as `audit` and `doctor`
        if lost is not None:
            result["loss"] = lost.line
            result["equal"] = False
        if as_json:
            _print_json(result)
        else:
            if caught_up:
                base = (
                    f"persisted read models at position {persisted_position}"
                    if persisted_position
                    else "no persisted read models"
                )
                console.print(
                    f"caught up {caught_up} events ({base}; the log is at {runner.position}) "
                    "before comparing"
                )
            table = Table(title=f"replay --verify · {count} events")
            table.add_column("projection")
            table.add_column("equal")
            for name, v in result["projections"].items():
                table.add_row(shown(name), "yes" if v["equal"] else "NO")
            show(console, table)
        if lost is not None:
            raise CommandError(lost.line)
        if runner.ahead:
            raise CommandError(
                f"persisted read models claim {runner.ahead} events past the end of the log "
                f"(at {ledger.max_position()}): events were lost or the models belong to "
                "another log; run `ctxledger replay` to rebuild them"
            )
        if not result["equal"]:
            bad = [n for n, v in result["projections"].items() if not v["equal"]]
            raise CommandError(f"replay differs from persisted read models: {', '.join(bad)}")


@app.command()
def demo(
    path: Annotated[Path, typer.Option("--path", help="Where to write the demo ledger.")] = Path(
        ".ctxledger/demo.db"
    ),
    as_json: JsonOpt = False,
    encrypt: EncryptOpt = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Replace files at --path (and catalog.db, demo-workspace/ beside it) that an "
            "earlier demo did not write.",
        ),
    ] = False,
) -> None:
    """Run the scripted demo session into a fresh SQLite ledger and show the result; only
    files an earlier demo wrote are replaced without --force."""
    from ctxledger.adapters.cli.demo import run_demo

    run_demo(path, console=cli_console(markup=True), as_json=as_json, encrypt=encrypt, force=force)


app.command()(cli_inspect.inspect)
app.command()(cli_inspect.generations)
app.command()(cli_inspect.diff)
app.command()(cli_inspect.audit)
app.command()(cli_doctor.doctor)
app.add_typer(memory_app, name="memory")
app.command()(cli_simulate.simulate)
app.command()(cli_simulate.compare)
app.command()(cli_serve.serve)
app.command()(cli_api.api)
app.command()(cli_control.control)
app.command()(cli_control.configure)
app.command()(cli_erase.erase)


def _show_version(value: bool) -> None:
    if value:
        from ctxledger.adapters import __version__

        sys.stdout.write(f"ctxledger {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print the version and exit.", is_eager=True, callback=_show_version
        ),
    ] = False,
    log_level: Annotated[
        LogLevel,
        typer.Option(
            "--log-level",
            envvar="CTXLEDGER_LOG_LEVEL",
            help="Log records of the ctxledger loggers at this level and above, on stderr.",
        ),
    ] = LogLevel.warning,
    key_file: Annotated[
        Path | None,
        typer.Option(
            "--key-file",
            envvar=KEY_FILE_ENV,
            help="Master key file (32 bytes, or base64 of them) for content encryption.",
        ),
    ] = None,
) -> None:
    configure_logging(log_level)
    if key_file is not None:  # read by the composition root, like CTXLEDGER_MASTER_KEY
        read_key_file(key_file)  # a missing or malformed file fails here, in one line
        os.environ[KEY_FILE_ENV] = str(key_file)


def _click_exceptions() -> tuple[
    tuple[type[BaseException], ...],
    tuple[type[BaseException], ...],
    tuple[type[BaseException], ...],
]:
    """``(ClickException, Abort, Exit)`` classes of the click that typer runs on: its own copy
    (``typer._click``, typer ≥ 0.2x, whose Exit and Abort are typer's) or the real click
    (older typer), plus the real click's when something loaded it. ``except
    click.ClickException`` alone misses the vendored copy."""
    errors: set[type[BaseException]] = {
        c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"
    }
    aborts: set[type[BaseException]] = {typer.Abort}
    exits: set[type[BaseException]] = {typer.Exit}
    real = sys.modules.get("click.exceptions")
    if real is not None:
        errors.add(real.ClickException)
        aborts.add(real.Abort)
        exits.add(real.Exit)
    return tuple(errors), tuple(aborts), tuple(exits)


def _usage_line(exc: Any) -> str:
    """A click exception as one line, naming the command's help when it is a usage error."""
    message = " ".join(str(exc.format_message()).split())
    if getattr(exc, "exit_code", 1) == 2:
        ctx = getattr(exc, "ctx", None)
        command = ctx.command_path if ctx is not None else "ctxledger"
        message += f" (see `{command} --help`)"
    return message


def _one_line(message: str, limit: int = ERROR_LIMIT) -> str:
    """*message* on one line, control characters visible, cut past *limit* characters: an
    error may quote agent text (an id with an ANSI escape, a provider's error)."""
    return visible(" ".join(message.split()), limit)


def main(argv: list[str] | None = None) -> int:
    """Console entry point: never a traceback. Typed errors are one line on stderr and exit 1;
    usage errors one line and exit 2; no command at all prints the help, exit 2."""
    errors, aborts, exits = _click_exceptions()
    try:
        code = app(args=argv, prog_name="ctxledger", standalone_mode=False)
    except CtxLedgerError as exc:
        hint = DAMAGE_HINT if isinstance(exc, DecodeError) and exc.position is not None else ""
        sys.stderr.write(f"ctxledger: error: {_one_line(str(exc))}{hint}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("ctxledger: aborted\n")
        return 130
    except errors as exc:
        click_exc: Any = exc  # one of several unrelated ClickException classes
        if type(exc).__name__ == "NoArgsIsHelpError":  # `ctxledger`, `ctxledger memory`
            # typer's rich help has already printed itself on stdout; plain click's is the text
            text = str(click_exc.format_message()).strip("\n")
            if text:
                sys.stdout.write(text + "\n")
            return 2
        sys.stderr.write(f"ctxledger: error: {_usage_line(click_exc)}\n")
        return int(click_exc.exit_code)
    except aborts:
        sys.stderr.write("ctxledger: aborted\n")
        return 130
    except exits as exc:
        return int(getattr(exc, "exit_code", 0) or 0)
    except Exception as exc:  # a failure nothing above names (a bug, the OS): still one line
        if os.environ.get(DEBUG_ENV):
            raise
        detail = _one_line(str(exc), 300)
        sys.stderr.write(
            f"ctxledger: error: {type(exc).__name__}: {detail} "
            f"(unexpected; {DEBUG_ENV}=1 shows the traceback)\n"
        )
        return 1
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    raise SystemExit(main())
