"""``clgate import``: a per-class results table (CSV or JSON Lines) from any framework → an evaluation log."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from clgate.cli.metrics_cmd import fail


class TableFormatOption(StrEnum):
    csv = "csv"
    jsonl = "jsonl"


class AmbiguousOption(StrEnum):
    refuse = "refuse"
    nearest = "nearest"


class ScenarioOption(StrEnum):
    nc = "nc"
    ni = "ni"
    nic = "nic"


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

ScenarioOpt = Annotated[
    ScenarioOption,
    typer.Option(
        "--scenario",
        help="nc: rows are classes (the default). ni (new instances) or nic (new instances and classes): "
        "rows are cells, named by a group column (the sample group) beside the class.",
    ),
]
GroupsOption = Annotated[
    str | None,
    typer.Option(
        "--groups",
        help='With --scenario ni or nic: the sample group of each task, as JSON, e.g. \'["day","night"]\' '
        "(default: the group of the cells first evaluated during each task).",
    ),
]
ClassesOption = Annotated[
    str | None,
    typer.Option(
        "--classes",
        help="With --scenario nic and --groups: the classes each task brings, as JSON, "
        "e.g. '[[0,1],[0,1,2]]'.",
    ),
]


def import_command(
    table: Annotated[
        Path,
        typer.Argument(
            help="CSV or JSON Lines table: iteration, task, class, correct (or accuracy), total; and group "
            "with --scenario ni or nic."
        ),
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
    scenario: ScenarioOpt = ScenarioOption.nc,
    groups: GroupsOption = None,
    classes: ClassesOption = None,
) -> None:
    """Turn a per-class results table into a validated clgate.evaluation-log/v1 (exit 2 on bad input)."""
    # lazy: CLI — `clgate --help` loads no command's dependencies
    from clgate.log_import import TableError, import_table, read_totals

    layout = _task_layout(tasks)
    group_order = _group_order(groups)
    brought = _task_layout(classes, option="--classes")
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
            scenario=scenario.value,
            groups=group_order,
            classes=brought,
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
    if ignored and "group" in ignored:
        note += " (a table of sample groups? give --scenario ni or nic)"
    if log.class_of is not None:
        what = f"{log.n_real_classes} classes in {log.n_classes} cells ({log.scenario})"
    else:
        what = f"{log.n_classes} classes"
    typer.echo(f"{out}: {log.n_tasks} tasks, {what}, {len(log.points)} points{note}")


def _json_option(text: str, option: str, example: str) -> Any:
    """An option's JSON value, read as the table's JSON is (:func:`clgate.log_import.parse_json`); exit 2
    naming the option when it is not JSON, nests too deeply or holds an integer of thousands of digits."""
    # lazy: CLI — `clgate --help` loads no command's dependencies
    from clgate.log_import import TableError, parse_json

    try:
        return parse_json(text, option, invalid="not JSON")
    except TableError as exc:
        fail(f"{exc}; write it like {example}")


def _task_layout(tasks: str | None, *, option: str = "--tasks") -> list[list[int | str]] | None:
    """``--tasks`` (or ``--classes``) as a list of class lists (exit 2 naming the option otherwise)."""
    if tasks is None:
        return None
    layout = _json_option(tasks, option, "'[[0,1],[2,3]]'")
    if not (isinstance(layout, list) and layout and all(isinstance(g, list) and g for g in layout)):
        fail(f"{option}: expected a non-empty list of non-empty class lists, like '[[0,1],[2,3]]'")
    if any(isinstance(c, (bool, float, dict, list)) or c is None for g in layout for c in g):
        fail(f"{option}: classes must be integer ids or names")
    return layout


def _group_order(groups: str | None) -> list[str] | None:
    """``--groups`` as a list of group names (exit 2 naming the option when it is not one)."""
    if groups is None:
        return None
    order = _json_option(groups, "--groups", '\'["day","night"]\'')
    names = isinstance(order, list) and all(
        isinstance(g, (str, int)) and not isinstance(g, bool) for g in order
    )
    if not (names and order):  # true is no group name (it was read as the group 'True')
        fail('--groups: expected a non-empty list of group names, like \'["day","night"]\'')
    return [str(g) for g in order]


def register(app: typer.Typer) -> None:
    app.command("import")(import_command)
