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


class AmbiguousOption(StrEnum):
    refuse = "refuse"
    nearest = "nearest"


DecimalsOption = Annotated[
    int | None,
    typer.Option(
        "--decimals",
        min=0,
        max=15,
        help="The accuracies were rounded to this many decimals: each count is the one correct/total "
        "that rounds to the accuracy (a row where none or several do is refused).",
    ),
]
TotalsOption = Annotated[
    Path | None,
    typer.Option(
        "--totals",
        help="Each class's number of evaluated samples, for a table without a total column: a JSON "
        "object (class to size) or a CSV file with the columns class and total.",
    ),
]
TotalOption = Annotated[
    int | None,
    typer.Option(
        "--total", min=1, help="The same number of evaluated samples for every class (instead of --totals)."
    ),
]
OnAmbiguousOption = Annotated[
    AmbiguousOption,
    typer.Option(
        "--on-ambiguous",
        help="With --decimals, when several counts round to an accuracy: refuse the table, or take "
        "the nearest count (ties: the lower one).",
    ),
]


def import_command(
    table: Annotated[
        Path,
        typer.Argument(help="CSV or JSON Lines table: iteration, task, class, correct (or accuracy), total."),
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
    decimals: DecimalsOption = None,
    totals: TotalsOption = None,
    total: TotalOption = None,
    on_ambiguous: OnAmbiguousOption = AmbiguousOption.refuse,
) -> None:
    """Turn a per-class results table into a validated clgate.evaluation-log/v1 (exit 2 on bad input)."""
    # lazy: CLI — `clgate --help` loads no command's dependencies
    from clgate.log_import import TableError, import_table, read_totals

    layout = _task_layout(tasks)
    if totals is not None and total is not None:
        fail("--totals and --total: give one of them (a file of class sizes, or one size for every class)")
    if on_ambiguous is AmbiguousOption.nearest and decimals is None:
        fail("--on-ambiguous: only applies with --decimals (the rounding that makes counts ambiguous)")
    try:
        sizes = read_totals(totals) if totals is not None else total
        log = import_table(
            table,
            fmt=fmt.value if fmt else None,
            tasks=layout,
            decimals=decimals,
            totals=sizes,
            on_ambiguous=on_ambiguous.value,
        )
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
    if log.meta.get("accuracy_only"):
        note += "; accuracies only (no class sizes: give --totals or --total for counts and bounds)"
    typer.echo(f"{out}: {log.n_tasks} tasks, {log.n_classes} classes, {len(log.points)} points{note}")


def _task_layout(tasks: str | None) -> list[list[int | str]] | None:
    """``--tasks`` as a list of class lists (exit 2 naming the option when it is not one)."""
    if tasks is None:
        return None
    try:
        layout = json.loads(tasks)
    except json.JSONDecodeError as exc:
        fail(f"--tasks: not JSON ({exc.msg}); write it like '[[0,1],[2,3]]'")
    if not (isinstance(layout, list) and layout and all(isinstance(g, list) and g for g in layout)):
        fail("--tasks: expected a non-empty list of non-empty class lists, like '[[0,1],[2,3]]'")
    if any(isinstance(c, (bool, float, dict, list)) or c is None for g in layout for c in g):
        fail("--tasks: classes must be integer ids or names")
    return layout


def register(app: typer.Typer) -> None:
    app.command("import")(import_command)
