"""How decisions and metrics results show themselves in Jupyter (``_repr_html_``) and become data
frames (``to_frame()``, with pandas when it is installed).

The HTML is self-contained (inline styles, no script): the verdict, the worst class at its worst
moment, the rules, and a heatmap of the accuracies (green high, red low). Standard library only.

An NI/NIC log's columns are *cells* (a class on the sample group of one task, ``"cat @ night"``): there
the view says "cell" where it shows one and adds each real class pooled over its cells, the worst one
named first, as the reports do. An NC log's view is unchanged.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

# The contract's models call into this module (their ``_repr_html_``), so it names them only in words:
# a decision is a clgate.schemas.decision.Decision, metrics a MetricsResult or RunsResult.
Decision = Any
MetricsResult = Any
RunsResult = Any

VERDICT_COLOURS = {"PASS": "#1a7f37", "WARN": "#9a6700", "FAIL": "#cf222e", "ERROR": "#6e7781"}
CELL = "padding:2px 8px;border:1px solid #d0d7de;text-align:right"


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"


def heat_colour(value: float | None) -> str:
    """Background of a heatmap cell for an accuracy in [0, 1]: red (0) → yellow → green (1).

    >>> heat_colour(0.0), heat_colour(1.0), heat_colour(None)
    ('hsl(0, 70%, 80%)', 'hsl(120, 70%, 80%)', '#f6f8fa')
    """
    if value is None:
        return "#f6f8fa"
    return f"hsl({round(120 * min(1.0, max(0.0, value)))}, 70%, 80%)"


def heatmap(title: str, columns: Sequence[str], rows: Sequence[tuple[str, Sequence[float | None]]]) -> str:
    """A table whose cells are coloured by value (``class="clgate-heatmap"``)."""
    head = "".join(f'<th style="{CELL}">{_e(c)}</th>' for c in columns)
    body = "".join(
        f'<tr><th style="{CELL};text-align:left">{_e(name)}</th>'
        + "".join(
            f'<td class="clgate-cell" style="{CELL};background:{heat_colour(v)}">{_pct(v)}</td>'
            for v in values
        )
        + "</tr>"
        for name, values in rows
    )
    return (
        f'<table class="clgate-heatmap" style="border-collapse:collapse"><caption>{_e(title)}</caption>'
        f'<tr><th style="{CELL}"></th>{head}</tr>{body}</table>'
    )


def verdict_banner(verdict: str, summary: str) -> str:
    colour = VERDICT_COLOURS.get(verdict, "#6e7781")
    return (
        f'<div class="clgate-verdict" data-verdict="{_e(verdict)}" style="font-size:1.3em;font-weight:bold;'
        f'color:{colour}">{_e(verdict)}</div><p class="clgate-summary">{_e(summary)}</p>'
    )


def worst_moment_html(column: str, name: str, ident: int, task: int, accuracy: float | None, at: str) -> str:
    """The worst ``column`` (``"class"``, or ``"cell"`` in an NI/NIC log) at its worst moment."""
    return (
        f'<p class="clgate-worst-moment">Worst {column} at its worst moment: <b>{_e(name)}</b> '
        f"({column} {ident}, task {task}) at {_pct(accuracy)}{at}</p>"
    )


def worst_pooled_html(
    name: str, accuracy: float | None, counts: str, n_cells: int, worst_cell: tuple[str, float | None] | None
) -> str:
    """NI/NIC logs: the class with the lowest accuracy pooled over its cells, its counts, its worst cell.

    >>> text = worst_pooled_html("cat", 0.65, "13 / 20", 2, ("cat @ night", 0.6))
    >>> text.split(": ", 1)[1]
    '<b>cat</b> at 65.0 % (13 / 20 over 2 cells; its worst cell <b>cat @ night</b> at 60.0 %)</p>'
    """
    cell = f"; its worst cell <b>{_e(worst_cell[0])}</b> at {_pct(worst_cell[1])}" if worst_cell else ""
    where = f"{counts} over {n_cells} cell{'s' if n_cells != 1 else ''}" if counts else _plural(n_cells)
    return (
        f'<p class="clgate-worst-pooled">Worst class pooled over its cells: <b>{_e(name)}</b> at '
        f"{_pct(accuracy)} ({_e(where)}{cell})</p>"
    )


def _plural(n_cells: int) -> str:
    return f"over {n_cells} cell{'s' if n_cells != 1 else ''}"


def _counts(correct: int | None, total: int | None, runs: int = 1) -> str:
    if correct is None or total is None:
        return ""
    return f"{correct} / {total}" + (f" ({runs} runs)" if runs > 1 else "")


def _decision_pooled(decision: Decision) -> str:
    """NI/NIC decisions: the worst class pooled over its cells; empty without pooled classes."""
    pooled = decision.headline.pooled_classes
    if not pooled:
        return ""
    first = pooled[0]
    worst_cell = (first.worst_cell, first.worst_cell_accuracy) if first.worst_cell else None
    counts = _counts(first.correct, first.total, decision.runs)
    return worst_pooled_html(first.name, first.accuracy, counts, len(first.cells), worst_cell)


def decision_html(decision: Decision, metrics: RunsResult | MetricsResult | None = None) -> str:
    """The decision: verdict, worst class (NI/NIC: cell) at its worst moment, rules; a heatmap of the
    classes (NI/NIC: of the cells, and of each class pooled over its cells)."""
    h = decision.headline
    column = "class" if h.pooled_classes is None else "cell"
    parts = [f'<div class="clgate-decision">{verdict_banner(decision.verdict, decision.summary)}']
    if h.worst_moment is not None:
        w = h.worst_moment
        at = f", iteration {w.iteration}" if w.iteration is not None else ""
        parts.append(worst_moment_html(column, w.class_name, w.class_id, w.task, w.accuracy, at))
    if h.pooled_classes is not None:
        parts.append(_decision_pooled(decision))
    rules = "".join(
        f'<tr><td style="{CELL};text-align:left">{_e(r.id)}</td><td style="{CELL}">{_e(r.status)}</td>'
        f'<td style="{CELL}">{_e(r.value if r.value is None else round(r.value, 4))}</td>'
        f'<td style="{CELL}">{_e(r.threshold)}</td></tr>'
        for r in decision.rules
    )
    parts.append(
        f'<table class="clgate-rules" style="border-collapse:collapse"><tr><th style="{CELL}">rule</th>'
        f'<th style="{CELL}">status</th><th style="{CELL}">value</th><th style="{CELL}">threshold</th></tr>'
        f"{rules}</table>"
    )
    if metrics is not None:
        parts.append(metrics_heatmaps(metrics))
    elif h.worst_classes:
        rows = [(f"{c.name} ({c.id})", [c.accuracy]) for c in h.worst_classes]
        plural = "classes" if column == "class" else "cells"
        parts.append(heatmap(f"worst {plural}: final accuracy", ["accuracy"], rows))
    if h.pooled_classes and metrics is None:  # with metrics, their heatmaps hold the pooled classes
        rows = [(f"{p.name} ({p.id})", [p.accuracy]) for p in h.pooled_classes]
        parts.append(heatmap("classes pooled over their cells: final accuracy", ["accuracy"], rows))
    parts.append("</div>")
    return "".join(parts)


def _single(metrics: RunsResult | MetricsResult) -> MetricsResult:
    runs = getattr(metrics, "runs", None)
    return runs[0] if runs else metrics


def metrics_heatmaps(metrics: RunsResult | MetricsResult) -> str:
    """Two heatmaps: each class (final and worst accuracy after it was learned), each per-task metric.
    An NI/NIC log's first one is of its cells, followed by one of each class pooled over its cells."""
    one = _single(metrics)
    classes = [
        (f"{c.name} ({c.id}, task {c.task})", [c.final_accuracy, c.min_after_learned]) for c in one.classes
    ]
    series = [
        (key, value)
        for key, value in metrics.metrics.items()
        if isinstance(value, list) and all(v is None or 0.0 <= v <= 1.0 for v in value)
    ]
    tasks = [f"task {k + 1}" for k in range(max((len(v) for _, v in series), default=0))]
    if one.pooled_classes is None:
        first = heatmap("classes", ["final", "worst after learned"], classes)
    else:
        pooled = [(f"{p.name} ({p.id})", [p.final_accuracy]) for p in one.pooled_classes]
        first = heatmap(
            "cells (a class on one task's sample group)", ["final", "worst after learned"], classes
        )
        first += heatmap("classes pooled over their cells", ["final"], pooled)
    return first + heatmap("per task", tasks, series)


def _metrics_pooled(one: MetricsResult) -> str:
    """NI/NIC logs: the class with the lowest final accuracy pooled over its cells, and its worst cell."""
    pooled = [p for p in one.pooled_classes or [] if p.final_accuracy is not None]
    if not pooled:
        return ""
    worst = min(pooled, key=lambda p: p.final_accuracy)
    cells = [c for c in one.classes if c.name in worst.cells and c.final_accuracy is not None]
    cell = min(cells, key=lambda c: c.final_accuracy, default=None)
    worst_cell = (cell.name, cell.final_accuracy) if cell is not None else None
    counts = _counts(worst.final_correct, worst.final_total)
    return worst_pooled_html(worst.name, worst.final_accuracy, counts, len(worst.cells), worst_cell)


def metrics_html(metrics: RunsResult | MetricsResult) -> str:
    """Metrics: the worst class (NI/NIC: cell, then the worst class pooled over its cells) at its worst
    moment, the scalars, the heatmaps."""
    one = _single(metrics)
    worst = min(
        (c for c in one.classes if c.min_after_learned is not None),
        key=lambda c: c.min_after_learned or 0.0,
        default=None,
    )
    column = "class" if one.pooled_classes is None else "cell"
    parts = ['<div class="clgate-metrics">']
    if worst is not None:
        at = (
            f", iteration {worst.min_after_learned_iteration}"
            if worst.min_after_learned_iteration is not None
            else ""
        )
        parts.append(worst_moment_html(column, worst.name, worst.id, worst.task, worst.min_after_learned, at))
    if one.pooled_classes is not None:
        parts.append(_metrics_pooled(one))
    scalars = "".join(
        f'<tr><td style="{CELL};text-align:left">{_e(k)}</td><td style="{CELL}">{v:.4g}</td></tr>'
        for k, v in metrics.metrics.items()
        if isinstance(v, float)
    )
    parts.append(f'<table class="clgate-scalars" style="border-collapse:collapse">{scalars}</table>')
    parts.append(metrics_heatmaps(metrics))
    parts.append("</div>")
    return "".join(parts)


def frame(records: list[dict[str, Any]], columns: Sequence[str]) -> Any:
    """A pandas DataFrame of ``records`` (ImportError naming pandas when it is not installed)."""
    import importlib

    try:
        pd = importlib.import_module("pandas")
    except ImportError:
        raise ImportError("to_frame() needs pandas: pip install pandas") from None
    return pd.DataFrame.from_records(records, columns=list(columns))


def metric_records(metrics: RunsResult | MetricsResult) -> list[dict[str, Any]]:
    """One row per metric value: (metric, task or None for a scalar, value); tasks 1-based."""
    rows: list[dict[str, Any]] = []
    for key, value in metrics.metrics.items():
        if isinstance(value, list):
            rows += [{"metric": key, "task": k + 1, "value": v} for k, v in enumerate(value)]
        else:
            rows.append({"metric": key, "task": None, "value": value})
    return rows
