"""``clgate metrics`` (every metric of an evaluation log) and ``clgate schema`` (JSON Schemas)."""

from __future__ import annotations

import importlib
import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from clgate.fmt import fmt

if TYPE_CHECKING:
    from rich.table import Table

    from clgate.metrics.arrays import LogArrays
    from clgate.schemas.metrics import MetricsResult, PooledClass, RunsResult


class TaskAccuracy(StrEnum):
    macro = "macro"
    micro = "micro"


# Name → "module:attribute" of the pydantic model whose JSON Schema ``clgate schema NAME`` prints.
SCHEMAS = {
    "evaluation-log": "clgate.schemas.evaluation_log:EvaluationLog",
    "metrics": "clgate.schemas.metrics:MetricsResult",
    "metrics-runs": "clgate.schemas.metrics:RunsResult",
    "job": "clgate.schemas.job:JobSpec",
    "policy": "clgate.schemas.policy:Policy",
    "decision": "clgate.schemas.decision:Decision",
}


def fail(message: str, code: int = 2) -> NoReturn:
    """Print an error for a person (no traceback) and exit with ``code``."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def load_logs(paths: list[Path]) -> list[LogArrays]:
    """Read and validate logs (JSON, JSON Lines or the ``.npz`` encoding) straight into arrays; a bad
    one exits 2 with the validation message."""
    # lazy: CLI — `clgate --help` loads no command's dependencies
    from clgate.logfile import read_log
    from clgate.schemas.evaluation_log import EvaluationLogError

    logs = []
    for path in paths:
        try:
            logs.append(read_log(path))
        except EvaluationLogError as exc:
            fail(str(exc))
    return logs


def parse_weights(text: str | None) -> list[float] | None:
    if text is None:
        return None
    try:
        return [float(w) for w in text.split(",")]
    except ValueError:
        fail(f"--weights: {text!r} is not a comma-separated list of numbers")
    return None  # unreachable


def metrics_command(
    logs: Annotated[
        list[Path],
        typer.Argument(
            help="Evaluation log(s). Several logs are several runs (seeds) of one job.", show_default=False
        ),
    ],
    as_json: Annotated[
        bool, typer.Option("--json", help='Print JSON ({"metrics": {id: value}, …}).')
    ] = False,
    task_accuracy: Annotated[
        TaskAccuracy,
        typer.Option("--task-accuracy", help="Task accuracy: mean of class accuracies, or pooled counts."),
    ] = TaskAccuracy.macro,
    window: Annotated[
        list[int] | None,
        typer.Option(
            "--window",
            "-w",
            help="Window (evaluation points) for wf{w}/wp{w}; repeatable. Without it: 10 and 100.",
        ),
    ] = None,
    weights: Annotated[
        str | None,
        typer.Option(
            help="Weights of the cl_score criteria a_lifetime, rem, bwt_plus, fwt_lifetime, ms, sss, ce, in "
            "that order: seven comma-separated numbers that sum to 1 (default 1/7 each).",
        ),
    ] = None,
    epsilon: Annotated[
        float, typer.Option(help="ε ≥ 1, the scaling factor of ce (Díaz-Rodríguez eq. 7).")
    ] = 1.0,
    baseline: Annotated[
        Path | None,
        typer.Option(help="Baseline log over the same classes: adds class_regression and per-class deltas."),
    ] = None,
    confidence: Annotated[
        float, typer.Option(help="Confidence level of the Wilson bounds (mica_lcb).")
    ] = 0.95,
) -> None:
    """Compute every clgate metric of one evaluation log, or of several runs of one job."""
    # lazy: CLI — `clgate --help` loads no command's dependencies
    from clgate.metrics import compute_metrics, compute_runs

    windows = tuple(window) if window else (10, 100)
    if any(w < 2 for w in windows):
        fail(f"--window: windows must be at least 2 evaluation points, got {min(windows)}")
    if not 0 < confidence < 1:
        fail(f"--confidence: must be strictly between 0 and 1, got {confidence}")
    loaded = load_logs(logs)
    base = load_logs([baseline])[0] if baseline else None
    options: dict[str, Any] = dict(
        task_accuracy=task_accuracy.value,
        windows=windows,
        weights=parse_weights(weights),
        epsilon=epsilon,
        baseline=base,
        confidence=confidence,
    )
    try:
        result = (
            compute_metrics(loaded[0], **options) if len(loaded) == 1 else compute_runs(loaded, **options)
        )
    except ValueError as exc:  # options the data cannot honour (weights, baseline over other classes …)
        fail(str(exc))
    warn_plugins(result)
    if as_json:
        sys.stdout.write(result.model_dump_json(indent=2) + "\n")
        return
    print_result(result, [str(p) for p in logs])


def warn_plugins(result: Any = None) -> None:
    """``warning:`` lines on stderr for broken plug-ins and plug-in metrics that failed on ``result``."""
    # lazy: CLI — `clgate --help` loads no command's dependencies
    from clgate.policy.plugins import plugin_warnings

    for line in plugin_warnings(result):
        typer.echo(f"warning: {line}", err=True)


def plugins_command(
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON (metrics, rule kinds, refused).")
    ] = False,
) -> None:
    """List the installed plug-in metrics and rule kinds, with their distribution and version, and the
    broken or refused ones with the reason."""
    # lazy: CLI — `clgate --help` loads no command's dependencies
    from clgate.metrics.plugins import plugins_enabled
    from clgate.metrics.registry import found_plugins, plugin_registry
    from clgate.policy.plugins import rule_kinds

    metrics, infos, kinds = found_plugins(), plugin_registry(), rule_kinds()
    rows = []
    for metric_id, m in metrics.metrics.items():
        info = infos[metric_id]
        rows.append(
            {
                "type": "metric",
                "name": metric_id,
                "shape": None if m.problem else info.shape,
                "higher_is_better": None if m.problem else info.higher_is_better,
                "range": None if m.problem else list(info.range),
                "description": None if m.problem else info.description,
                **_origin_fields(m.origin),
                "problem": m.problem,
            }
        )
    for kind, k in kinds.kinds.items():
        rows.append({"type": "rule kind", "name": kind, **_origin_fields(k.origin), "problem": k.problem})
    refused = metrics.refused + kinds.refused
    if as_json:
        document = {"enabled": plugins_enabled(), "plugins": rows, "refused": refused}
        typer.echo(json.dumps(document, indent=2))
        return
    _print_plugins(rows, refused, plugins_enabled())


def _origin_fields(origin: Any) -> dict[str, str]:
    return {
        "distribution": origin.distribution,
        "version": origin.version,
        "entry_point": f"{origin.group}:{origin.name} = {origin.value}",
    }


def _print_plugins(rows: list[dict[str, Any]], refused: list[str], enabled: bool) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    if not enabled:
        console.print("plug-ins are off (CLGATE_PLUGINS=off): only the built-ins are used")
        return
    if not rows and not refused:
        console.print("no plug-in installed (entry-point groups clgate.metrics and clgate.rules)")
        return
    table = Table(title="Plug-ins", title_justify="left")
    for column in ("type", "name", "what", "distribution", "status"):
        table.add_column(column, no_wrap=column in ("type", "name"))
    for r in rows:
        what = ""
        if r["type"] == "metric" and not r["problem"]:
            arrow = "↑" if r["higher_is_better"] else "↓"
            what = f"{r['shape']} {arrow} [{r['range'][0]:g}, {r['range'][1]:g}]"
        table.add_row(
            r["type"],
            escape(r["name"]),
            what,
            escape(f"{r['distribution']} {r['version']}"),
            "ok" if not r["problem"] else escape(f"BROKEN: {r['problem']}"),
        )
    console.print(table)
    for line in refused:
        console.print(escape(line))


def schema_command(
    name: Annotated[str, typer.Argument(help=f"One of: {', '.join(SCHEMAS)}.", show_default=False)],
) -> None:
    """Print the JSON Schema of a clgate document (evaluation log, metrics, job, policy, decision)."""
    if name not in SCHEMAS:
        fail(f"unknown schema {name!r}; choose one of: {', '.join(SCHEMAS)}")
    module_name, attribute = SCHEMAS[name].split(":")
    try:
        model = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError):
        fail(f"schema {name!r} is not available in this version of clgate")
    typer.echo(json.dumps(model.model_json_schema(), indent=2))


# ---------------------------------------------------------------------- rendering
def _arrow(metric_id: str) -> str:
    # lazy: CLI — `clgate --help` loads no command's dependencies
    from clgate.metrics import metric_info

    try:
        return "↑" if metric_info(metric_id).higher_is_better else "↓"
    except KeyError:
        return ""


def _per_task_table(title: str, metrics: dict[str, Any], n_tasks: int) -> Table:
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    table.add_column("metric")
    for k in range(n_tasks):
        table.add_column(f"task {k + 1}", justify="right")
    for metric_id, value in metrics.items():
        if isinstance(value, list):
            table.add_row(f"{metric_id} {_arrow(metric_id)}", *(fmt(v) for v in value))
    return table


def _pooled_table(pooled_classes: list[PooledClass]) -> Table:
    """NI/NIC logs: each class pooled over the groups seen (``MetricsResult.pooled_classes``)."""
    from rich.markup import escape
    from rich.table import Table

    # lazy: CLI — `clgate --help` loads no command's dependencies
    from clgate.fmt import printable

    pooled = Table(title="Per class, pooled over the groups seen so far", title_justify="left")
    for column in ("class", "final", "correct / total", "cells"):
        pooled.add_column(column, justify="right" if column in ("final", "correct / total") else "left")
    for p in pooled_classes:
        counts = "—" if p.final_total is None else f"{p.final_correct} / {p.final_total}"
        pooled.add_row(escape(printable(p.name)), fmt(p.final_accuracy), counts, str(len(p.cells)))
    return pooled


def print_result(result: MetricsResult | RunsResult, sources: list[str]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    # lazy: CLI — `clgate --help` loads no command's dependencies
    from clgate.fmt import printable
    from clgate.schemas.metrics import MetricsResult

    console = Console()
    if isinstance(result, MetricsResult):
        real = {c.of_class for c in result.classes if c.of_class is not None}
        columns = (
            f"{result.n_classes} cells of {len(real)} classes" if real else f"{result.n_classes} classes"
        )
        console.print(
            f"[bold]{sources[0]}[/]: {result.n_tasks} tasks, {columns}, task accuracy {result.task_accuracy}"
        )
        console.print(_per_task_table("Per-task metrics", result.metrics, result.n_tasks))
        scalars = Table(title="Scalar metrics", title_justify="left")
        scalars.add_column("metric")
        scalars.add_column("value", justify="right")
        scalars.add_column("note")
        for metric_id, value in result.metrics.items():
            if not isinstance(value, list):
                scalars.add_row(
                    f"{metric_id} {_arrow(metric_id)}", fmt(value), result.reasons.get(metric_id, "")
                )
        console.print(scalars)
        nulls = {k: v for k, v in result.reasons.items() if isinstance(result.metrics.get(k), list)}
        for metric_id, reason in nulls.items():
            console.print(f"[dim]{metric_id}: {reason}[/]")
        if result.class_deltas is not None:
            deltas = Table(title="Per-class final accuracy vs baseline", title_justify="left")
            for column in ("class", "final", "Δ vs baseline"):
                deltas.add_column(column, justify="right" if column != "class" else "left")
            for stats, delta in zip(result.classes, result.class_deltas, strict=False):
                deltas.add_row(
                    escape(printable(stats.name)),  # a class name from the log: inert on a terminal
                    fmt(stats.final_accuracy),
                    "—" if delta is None else f"{delta:+.4f}",
                )
            console.print(deltas)
        if result.pooled_classes:
            console.print(_pooled_table(result.pooled_classes))
        return

    n_tasks = result.runs[0].n_tasks
    console.print(
        f"[bold]{len(result.runs)} runs[/] ({', '.join(sources)}): {n_tasks} tasks; per-task values are means"
    )
    console.print(_per_task_table("Per-task metrics (mean over runs)", result.metrics, n_tasks))
    scalars = Table(title="Scalar metrics over runs", title_justify="left")
    scalars.add_column("metric")
    for i, run in enumerate(result.runs):
        seed = run.meta.get("seed")
        scalars.add_column(f"run {i}" + (f" (seed {seed})" if seed is not None else ""), justify="right")
    for column in ("mean", "std", "worst"):
        scalars.add_column(column, justify="right")
    for metric_id, aggregate in result.aggregates.items():
        if isinstance(aggregate.mean, list):
            continue
        per_run = [fmt(run.metrics.get(metric_id)) for run in result.runs]
        scalars.add_row(
            f"{metric_id} {_arrow(metric_id)}",
            *per_run,
            fmt(aggregate.mean),
            fmt(aggregate.std),
            fmt(aggregate.worst),
        )
    console.print(scalars)
    if "cl_stability" in result.metrics:
        note = result.reasons.get("cl_stability")
        console.print(
            f"cl_stability ↑ = {fmt(result.metrics['cl_stability'])}" + (f"  ({note})" if note else "")
        )


def register(app: typer.Typer) -> None:
    app.command("metrics")(metrics_command)
    app.command("schema")(schema_command)
    app.command("plugins")(plugins_command)
