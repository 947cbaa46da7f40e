"""The report's figures, as inline SVG text (matplotlib, no pyplot state, no network).

Each function takes arrays/metrics and returns an ``<svg …>`` string ready to embed in HTML. SVG
output is made reproducible (fixed hash salt, no date metadata) so the same input gives the same file.
Figures are drawn for the full report width (10 in wide) with their legends outside the plotting area,
so that no legend hides a curve or a minimum.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

_COLORS = [
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
]


_WIDTH = 10.0
_FONT = 9


def _legend_outside(ax: Any, **kwargs: Any) -> None:
    """The legend to the right of the axes, never over the data."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=_FONT, **kwargs)


def _figure(width: float = _WIDTH, height: float = 3.6) -> Any:
    import matplotlib

    matplotlib.rcParams["svg.hashsalt"] = "clgate"
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: smaller, searchable
    matplotlib.rcParams["text.parse_math"] = False  # a class named "$x$" is text, not mathtext
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": "clgate"})
    text = buf.getvalue()
    start = text.find("<svg")
    text = text[start:] if start >= 0 else text
    # the RDF metadata block only names namespaces (purl.org, creativecommons.org): drop it
    text = re.sub(r"\s*<metadata>.*?</metadata>", "", text, count=1, flags=re.DOTALL)
    return re.sub(r'\s+xmlns:(?:dc|cc|rdf)="[^"]*"', "", text)


def _column(a: Any) -> str:
    """What a column of the log is: ``"class"``, or ``"cell"`` in an NI/NIC log (a class on the sample
    group of one task). ``a``: a log's arrays or a metrics result."""
    if getattr(a, "class_of", None) is not None or getattr(a, "pooled_classes", None) is not None:
        return "cell"
    return "class"


def _per_task(v: Any, k: int) -> np.ndarray:
    if not isinstance(v, list):
        return np.full(k, np.nan)
    return np.array([np.nan if x is None else float(x) for x in v], dtype=float)


def _nanmean(series: np.ndarray) -> np.ndarray:
    """Column means ignoring NaN; NaN (no warning) where a column has no value (e.g. RAF at task 1)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(series, axis=0)


def acc_vs_mica(runs: Sequence[Any], title: str = "") -> str:
    """ACC and MICA (and MICA of old classes) at each task end; one thin line per run, bold mean."""
    k = runs[0].n_tasks
    x = np.arange(1, k + 1)
    fig = _figure()
    ax = fig.subplots()
    for metric, color, label, style in (
        ("acc", _COLORS[0], "ACC", "-"),
        ("mica", _COLORS[1], "MICA", "-"),
        ("mica_old", _COLORS[3], "MICA (old classes)", "--"),
    ):
        series = np.array([_per_task(r.metrics.get(metric), k) for r in runs])
        if np.all(np.isnan(series)):
            continue
        if len(runs) > 1:
            for s in series:
                ax.plot(x, s, color=color, alpha=0.25, linewidth=1)
        mean = _nanmean(series) if len(runs) > 1 else series[0]
        ax.plot(
            x,
            mean,
            marker="o",
            color=color,
            linewidth=2 if style == "-" else 1.2,
            linestyle=style,
            label=label,
            gid=f"line-{metric}",
        )
    ax.set_xlabel("task k")
    ax.set_ylabel("accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xticks(x)
    ax.grid(alpha=0.3)
    _legend_outside(ax)
    worst = f"worst {_column(runs[0])}"
    ax.set_title(title or f"Average accuracy vs {worst} (Konaté et al., eqs. 3, 5)", fontsize=10)
    return _svg(fig)


def class_boxplots(arrays: Sequence[Any], title: str = "") -> str:
    """Distribution of the class accuracies of the classes seen so far, at each task end (Konaté fig. 3)."""
    a0 = arrays[0]
    k = a0.n_tasks
    data = []
    for t in range(k):
        vals = []
        for a in arrays:
            if t < a.finished_tasks:
                seen = np.concatenate(a.tasks[: t + 1])
                row = a.r[t, seen]
                vals.extend(row[~np.isnan(row)].tolist())
        data.append(vals)
    fig = _figure()
    ax = fig.subplots()
    positions = [i + 1 for i, d in enumerate(data) if d]
    ax.boxplot(
        [d for d in data if d],
        positions=positions,
        widths=0.5,
        showmeans=True,
        meanprops={"marker": "^", "markerfacecolor": _COLORS[0], "markeredgecolor": _COLORS[0]},
    )
    for pos, d in zip(positions, [d for d in data if d], strict=True):
        jitter = np.linspace(-0.12, 0.12, len(d)) if len(d) > 1 else np.zeros(1)
        ax.scatter(pos + jitter, d, s=8, color=_COLORS[7], alpha=0.6, zorder=3)
    column = _column(a0)
    columns = "cells" if column == "cell" else "classes"
    ax.set_xlabel(f"task k ({column} accuracies of the {columns} of tasks 1…k, at the end of task k)")
    ax.set_ylabel(f"{column} accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xticks(range(1, k + 1))
    ax.grid(alpha=0.3, axis="y")
    runs = f" ({len(arrays)} runs pooled)" if len(arrays) > 1 else ""
    ax.set_title(
        title or f"{column.capitalize()} accuracies per task (as Konaté et al. fig. 3){runs}", fontsize=10
    )
    return _svg(fig)


def stability_gap(a: Any, seed: Any = None) -> str:
    """Accuracy of each task at every evaluation point, task boundaries, and each task's minimum after
    it was learned (the stability gap, De Lange et al. fig. 2)."""
    fig = _figure(_WIDTH, 4.0)
    ax = fig.subplots()
    it = a.iterations[: a.horizon] if a.horizon else a.iterations
    acc = a.task_acc[: len(it)]
    for j in range(a.n_tasks):
        color = _COLORS[j % len(_COLORS)]
        y = acc[:, j]
        if np.all(np.isnan(y)):
            continue
        ax.plot(it, y, color=color, linewidth=1.4, label=f"task {j + 1}", gid=f"task-curve-{j + 1}")
        if j < a.finished_tasks:
            e = int(a.task_end_idx[j])
            after = y[e + 1 :]
            if after.size and not np.all(np.isnan(after)):
                m = e + 1 + int(np.nanargmin(after))
                ax.plot(
                    [it[m]],
                    [y[m]],
                    marker="v",
                    markersize=8,
                    color=color,
                    markeredgecolor="black",
                    linestyle="none",
                    gid=f"min-acc-{j + 1}",
                )
                if a.n_tasks <= 10:  # beyond that the labels pile up; the markers stay
                    # above the marker near the axis, below it elsewhere: never on the x axis
                    dy = 8 if y[m] < 0.15 else -12
                    ax.annotate(
                        f"min {100 * y[m]:.0f} %",
                        (it[m], y[m]),
                        textcoords="offset points",
                        xytext=(5, dy),
                        fontsize=_FONT - 1,
                        color=color,
                        annotation_clip=False,
                    )
    for e in a.task_end_idx[:-1] if len(a.task_end_idx) else []:
        ax.axvline(a.iterations[int(e)], color="black", linestyle="--", linewidth=0.8, alpha=0.6)
    ax.set_xlabel("iteration (dashed: task boundaries; ▼ lowest accuracy after the task was learned)")
    ax.set_ylabel("task accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    if a.n_tasks <= 20:
        _legend_outside(ax, ncol=1 if a.n_tasks <= 10 else 2)
    s = f", seed {seed}" if seed is not None else ""
    ax.set_title(
        f"Per-iteration task accuracy: the stability gap (as De Lange et al. fig. 2){s}", fontsize=10
    )
    return _svg(fig)


def raa_raf(runs: Sequence[Any]) -> str:
    """Rescaled average accuracy and forgetting per task (Michel et al.), mean over runs."""
    k = runs[0].n_tasks
    x = np.arange(1, k + 1)
    fig = _figure(_WIDTH, 3.2)
    ax = fig.subplots()
    drawn = False
    for metric, color, label in (("raa", _COLORS[2], "RAA"), ("raf", _COLORS[4], "RAF")):
        series = np.array([_per_task(r.metrics.get(metric), k) for r in runs])
        if np.all(np.isnan(series)):
            continue
        mean = _nanmean(series) if len(runs) > 1 else series[0]
        ax.plot(x, mean, marker="s", color=color, linewidth=2, label=label, gid=f"line-{metric}")
        drawn = True
    ax.set_xlabel("task k")
    ax.set_ylabel("rescaled value")
    ax.set_xticks(x)
    ax.grid(alpha=0.3)
    if drawn:
        _legend_outside(ax)
    ax.set_title("Rescaled average accuracy and forgetting (Michel et al., defs. 4.1-4.3)", fontsize=10)
    return _svg(fig)


_HEATMAP_COLUMNS = 2000


def _heatmap_columns(class_acc: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Classes × columns of the heatmap, and each column's last point. Beyond ``_HEATMAP_COLUMNS``
    points a column is the worst (minimum) accuracy of consecutive points: a collapse stays visible,
    and a long log's image stays the size of the figure instead of ``P × C``."""
    n_points = class_acc.shape[0]
    if n_points <= _HEATMAP_COLUMNS:
        return np.array(class_acc[:, order].T, dtype=float), np.arange(n_points)
    starts = np.linspace(0, n_points, _HEATMAP_COLUMNS, endpoint=False).astype(np.int64)
    ends = np.r_[starts[1:], n_points]
    with np.errstate(invalid="ignore"):  # NaN only where no point evaluated it
        # one reduce per column: the same minima as np.fmin.reduceat(axis=0), several times faster
        worst = np.stack([np.fmin.reduce(class_acc[s:e], axis=0) for s, e in zip(starts, ends, strict=True)])
    return np.array(worst[:, order].T, dtype=float), ends - 1


def class_heatmap(a: Any, *, seed: Any = None, worst: Any = None) -> str:
    """Every class's accuracy (rows, grouped by task) at every evaluation point (columns): where a class
    collapses and whether it recovers. Grey: before the class's task (not learned yet). Solid lines:
    task boundaries. ○: the worst class at its worst moment (``worst``: a headline WorstMoment of this
    run, or None)."""
    from matplotlib.colors import LinearSegmentedColormap

    n_points = a.horizon or a.n_points
    order = np.concatenate(a.tasks) if a.tasks else np.arange(a.n_classes)
    acc, last = _heatmap_columns(a.class_acc[:n_points], order)  # classes × columns
    learned_from = a.task_start_idx[a.class_task[order]]
    acc[last[None, :] < learned_from[:, None]] = np.nan  # not learned yet: not a failure
    C = len(order)
    fig = _figure(_WIDTH, min(9.0, 1.6 + 0.24 * C))
    ax = fig.subplots()
    cmap = LinearSegmentedColormap.from_list(
        "clgate", ["#b2182b", "#f4a582", "#fddbc7", "#d1e5f0", "#2166ac"]
    ).with_extremes(bad="#e0e0e0")
    im = ax.imshow(
        np.ma.masked_invalid(acc),
        aspect="auto",
        cmap=cmap,
        vmin=0.0,
        vmax=1.0,
        interpolation="nearest",
        extent=(-0.5, n_points - 0.5, C - 0.5, -0.5),
    )
    im.set_gid("class-heatmap")
    for e in a.task_end_idx[:-1] if len(a.task_end_idx) else []:
        ax.axvline(int(e) + 0.5, color="black", linewidth=1.0, gid="task-boundary")
    sizes = [len(t) for t in a.tasks]
    for edge in np.cumsum(sizes)[:-1]:
        ax.axhline(edge - 0.5, color="black", linewidth=0.6, alpha=0.6)
    step = max(1, C // 25)
    ax.set_yticks(range(0, C, step))
    ax.set_yticklabels(
        [f"{a.class_names[c]} (t{int(a.class_task[c]) + 1})" for c in order[::step]], fontsize=_FONT - 1
    )
    ends = [int(e) for e in a.task_end_idx]
    ax.set_xticks(ends)
    ax.set_xticklabels([str(int(a.iterations[e])) for e in ends], fontsize=_FONT - 1)
    ax.set_xlabel("evaluation point (ticks: task ends, labelled with the iteration; lines: task boundaries)")
    column = _column(a)
    ax.set_ylabel(f"{column} (task)")
    if worst is not None and worst.iteration is not None:
        hits = np.flatnonzero(a.iterations[:n_points] == worst.iteration)
        rows = np.flatnonzero(order == worst.class_id)
        if hits.size and rows.size:
            ax.plot(
                [hits[0]],
                [rows[0]],
                marker="o",
                markersize=11,
                markerfacecolor="none",
                markeredgecolor="black",
                markeredgewidth=2,
                linestyle="none",
                gid="worst-moment",
            )
            ax.set_xlabel(
                ax.get_xlabel() + f"\n○ worst moment: {column} {worst.class_name}, "
                f"iteration {worst.iteration}, {100 * worst.accuracy:.1f} %"
            )
    cbar = fig.colorbar(im, ax=ax, location="right", fraction=0.04, pad=0.02)
    cbar.set_label(f"{column} accuracy", fontsize=_FONT)
    s = f", seed {seed}" if seed is not None else ""
    ax.set_title(f"Accuracy of every {column} at every evaluation point{s}", fontsize=10)
    return _svg(fig)


def is_finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)
