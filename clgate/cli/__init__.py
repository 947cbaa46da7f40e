"""The ``clgate`` command line. Each command group lives in its own module and registers itself here.

Heavy imports (torch, matplotlib, fastapi …) happen inside the commands, so ``clgate --help`` is fast.
"""

from __future__ import annotations

import os
import sys

import typer

from clgate._version import __version__
from clgate.cli import (
    audit_cmd,
    engine_cmd,
    gate_cmd,
    import_cmd,
    metrics_cmd,
    release_cmd,
    remote_cmd,
    service_cmd,
)
from clgate.cli.extras import guard_commands
from clgate.cli.help_text import make_readable

app = typer.Typer(
    name="clgate",
    help="Validate class-incremental classifiers on their worst class and their worst moment.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"clgate {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
) -> None:
    """clgate: worst-case metrics, release gates and audit reports for continual learners."""


def _register() -> None:
    for module in (
        metrics_cmd,
        import_cmd,
        engine_cmd,
        gate_cmd,
        release_cmd,
        service_cmd,
        audit_cmd,
        remote_cmd,
    ):
        module.register(app)
    # Commands that need clgate[engine] or clgate[service] exit 2 naming the extra when it is missing.
    guard_commands(app)
    make_readable(app)  # help without Python type names (<bool>, <list[Path]>)


_register()


def main() -> None:
    """Console entry point. Exit codes: 0 ok, 1 gate FAIL, 2 invalid input or usage, 3 internal error."""
    try:
        app()
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    except Exception as exc:
        if os.environ.get("CLGATE_DEBUG"):
            raise
        # lazy: CLI — `clgate --help` loads no command's dependencies
        from clgate.cli.operator_errors import settings_error_message

        operator = settings_error_message(exc)  # a store, broker or folder the settings point at: exit 2
        if operator is not None:
            sys.stderr.write(f"error: {operator}\n")
            sys.exit(2)
        sys.stderr.write(
            f"internal error: {type(exc).__name__}: {exc}\n"
            "this is a bug in clgate; rerun with CLGATE_DEBUG=1 for the traceback\n"
        )
        sys.exit(3)
