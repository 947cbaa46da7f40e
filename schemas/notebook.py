"""How decisions and metrics results show themselves in Jupyter (``_repr_html_``) and become data
frames (``to_frame()``, with pandas when it is installed).

The HTML is self-contained (inline styles, no script): the verdict, the worst class at its worst
moment, the rules, and a heatmap of the accuracies (green high, red low). Standard library only.
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


def decision_html(decision: Decision, metrics: RunsResult | MetricsResult | None = None) -> str:
    """The decision: verdict, worst class at its worst moment, rules; a heatmap of the classes."""
    h = decision.headline
    parts = [f'<div class="clgate-decision">{verdict_banner(decision.verdict, decision.summary)}']
    if h.worst_moment is not None:
        w = h.worst_moment
        at = f", iteration {w.iteration}" if w.iteration is not None else ""
        parts.append(
            f'<p class="clgate-worst-moment">Worst class at its worst moment: <b>{_e(w.class_name)}</b> '
            f"(class {w.class_id}, task {w.task}) at {_pct(w.accuracy)}{at}</p>"
        )
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
        parts.append(heatmap("worst classes: final accuracy", ["accuracy"], rows))
    parts.append("</div>")
    return "".join(parts)


def _single(metrics: RunsResult | MetricsResult) -> MetricsResult:
    runs = getattr(metrics, "runs", None)
    return runs[0] if runs else metrics


def metrics_heatmaps(metrics: RunsResult | MetricsResult) -> str:
    """Two heatmaps: each class (final and worst accuracy after it was learned), each per-task metric."""
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
    return heatmap("classes", ["final", "worst after learned"], classes) + heatmap("per task", tasks, series)


def metrics_html(metrics: RunsResult | MetricsResult) -> str:
    """Metrics: the worst class at its worst moment, the scalars, the heatmaps."""
    one = _single(metrics)
    worst = min(
        (c for c in one.classes if c.min_after_learned is not None),
        key=lambda c: c.min_after_learned or 0.0,
        default=None,
    )
    parts = ['<div class="clgate-metrics">']
    if worst is not None:
        at = (
            f", iteration {worst.min_after_learned_iteration}"
            if worst.min_after_learned_iteration is not None
            else ""
        )
        parts.append(
            f'<p class="clgate-worst-moment">Worst class at its worst moment: <b>{_e(worst.name)}</b> '
            f"(class {worst.id}, task {worst.task}) at {_pct(worst.min_after_learned)}{at}</p>"
        )
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
