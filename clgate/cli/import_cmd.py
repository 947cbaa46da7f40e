"""``clgate import``: a per-class results table (CSV or JSON Lines) from any framework → an evaluation log."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from clgate.cli.metrics_cmd import fail


class TableFormatOption(StrEnum):
    csv = "csv"
    jsonl = "jsonl"


def import_command(
    table: Annotated[
        Path, typer.Argument(help="CSV or JSON Lines table: iteration, task, class, correct, total.")
    ],
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Evaluation log to write (.json, .jsonl or .npz).")
    ],
    tasks: Annotated[
        str | None,
        typer.Option(
            help="Task layout as JSON, e.g. '[[0,1],[2,3]]' (default: classes in order of first evaluation)."
        ),
    ] = None,
    fmt: Annotated[
        TableFormatOption | None,
        typer.Option("--format", help="Table format (default: from the file suffix)."),
    ] = None,
) -> None:
    """Turn a per-class results table into a validated clgate.evaluation-log/v1 (exit 2 on bad input)."""
    # lazy: CLI — `clgate --help` loads no command's dependencies
    from clgate.log_import import TableError, import_table

    layout = None
    if tasks is not None:
        try:
            layout = json.loads(tasks)
        except json.JSONDecodeError as exc:
            fail(f"--tasks: not JSON ({exc.msg}); write it like '[[0,1],[2,3]]'")
        if not (isinstance(layout, list) and layout and all(isinstance(g, list) and g for g in layout)):
            fail("--tasks: expected a non-empty list of non-empty class lists, like '[[0,1],[2,3]]'")
        if any(isinstance(c, (bool, float, dict, list)) or c is None for g in layout for c in g):
            fail("--tasks: classes must be integer ids or names")
    try:
        log = import_table(table, fmt=fmt.value if fmt else None, tasks=layout)
    except TableError as exc:
        fail(str(exc))
    out.parent.mkdir(parents=True, exist_ok=True)
    # lazy: CLI — `clgate --help` loads no command's dependencies
    from clgate.logfile import write_log

    try:  # .npz: the binary encoding; .json: plus the .npz companion beside a long log
        write_log(log, out, format="npz" if out.suffix == ".npz" else "auto")
    except ValueError as exc:
        fail(f"--out: {exc}")
    ignored = log.meta.get("ignored_columns")
    note = f"; ignored column(s) {', '.join(ignored)}" if ignored else ""
    typer.echo(f"{out}: {log.n_tasks} tasks, {log.n_classes} classes, {len(log.points)} points{note}")


def register(app: typer.Typer) -> None:
    app.command("import")(import_command)
