"""Every metric of ``docs/metrics.md`` for one log (:func:`compute_metrics`) or several runs
(:func:`compute_runs`), with the reason of every ``null``, the evidence behind every worst case, and
per-class statistics.

Scope: per-task lists have K entries, ``null`` after the last finished task. Scalars describe the whole
run: for a partial log (F < K finished tasks) every scalar is ``null`` with the reason, never a value
computed on the finished tasks only (a gate would judge a run it did not see).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal, cast

import numpy as np

from clgate.metrics import functional as fn
from clgate.metrics import steps
from clgate.metrics.arrays import LogArrays, TaskAccuracy, wilson_interval
from clgate.metrics.registry import CL_CRITERIA, check_window, metric_ids, metric_info
from clgate.schemas.evaluation_log import EvaluationLog
from clgate.schemas.metrics import Aggregate, ClassStats, MetricsResult, MetricValue, PooledClass, RunsResult

LogLike = EvaluationLog | LogArrays

CONTINUAL_NOTE = (
    "the log has no evaluation point between task ends: computed from the task-end points only, "
    "so a stability gap between task ends cannot show"
)


# ---------------------------------------------------------------------------------------------- options
def _check_options(
    task_accuracy: str,
    windows: Sequence[int],
    weights: Sequence[float] | None,
    epsilon: float,
    confidence: float,
) -> tuple[list[int], np.ndarray]:
    if task_accuracy not in ("macro", "micro"):
        raise ValueError(f"task_accuracy: must be 'macro' or 'micro', got {task_accuracy!r}")
    if isinstance(windows, (str, bytes, int)):
        raise TypeError(f"windows: expected a sequence of integers ≥ 2, got {windows!r}")
    checked = list(dict.fromkeys(check_window(w) for w in windows))
    if weights is None:
        w = np.full(len(CL_CRITERIA), 1.0 / len(CL_CRITERIA))
    else:
        w = np.asarray(list(weights), dtype=float)
        if w.shape != (len(CL_CRITERIA),):
            raise ValueError(
                f"weights: expected {len(CL_CRITERIA)} weights for {', '.join(CL_CRITERIA)}, got {w.size}"
            )
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ValueError(f"weights: must be finite and ≥ 0, got {w.tolist()}")
        if not math.isclose(float(w.sum()), 1.0, abs_tol=1e-6):
            raise ValueError(f"weights: must sum to 1, they sum to {float(w.sum()):.6g}")
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon >= 1.0):
        raise ValueError(f"epsilon: the CE scaling factor must be a finite number ≥ 1, got {epsilon!r}")
    if not (isinstance(confidence, (int, float)) and 0.0 < confidence < 1.0):
        raise ValueError(f"confidence: must be strictly between 0 and 1, got {confidence!r}")
    return checked, w


def _arrays(log: LogLike, task_accuracy: TaskAccuracy, what: str = "log") -> LogArrays:
    if isinstance(log, LogArrays):
        return log.with_task_accuracy(task_accuracy)
    if isinstance(log, EvaluationLog):
        return LogArrays.from_log(log, task_accuracy=task_accuracy)
    raise TypeError(f"{what}: expected an EvaluationLog or LogArrays, got {type(log).__name__}")


# ---------------------------------------------------------------------------------------------- one log
def compute_metrics(
    log: LogLike,
    *,
    task_accuracy: Literal["macro", "micro"] = "macro",
    windows: Sequence[int] = (10, 100),
    weights: Sequence[float] | None = None,
    epsilon: float = 1.0,
    baseline: LogLike | None = None,
    confidence: float = 0.95,
) -> MetricsResult:
    """Every metric id of the spec for one evaluation log.

    ``windows`` selects the ``wf{w}``/``wp{w}`` ids; ``weights`` are the cl_score weights in the order
    of :data:`~clgate.metrics.registry.CL_CRITERIA` (default 1/7 each); ``epsilon`` scales CE (≥ 1);
    ``baseline`` (a log over the same classes) adds ``class_regression`` and ``class_deltas``;
    ``confidence`` is the level of the Wilson bounds. A metric whose needs are not met is ``None`` and
    ``reasons[id]`` says why.

    Each id is computed by the function its registry entry points at (:mod:`clgate.metrics.steps`),
    after its needs (:attr:`~clgate.metrics.registry.MetricInfo.own_needs`) and its fewest finished
    tasks (:attr:`~clgate.metrics.registry.MetricInfo.min_tasks`) are checked; the reason of a null
    comes from the need that is not met.

    >>> from clgate.schemas import EvaluationLog
    >>> log = EvaluationLog.parse({"tasks": [[0, 1], [2]], "points": [
    ...     {"iteration": 10, "task": 1, "task_end": True, "correct": [9, 8, 0], "total": [10, 10, 0]},
    ...     {"iteration": 15, "task": 2, "correct": [2, 6, 5], "total": [10, 10, 10]},
    ...     {"iteration": 20, "task": 2, "task_end": True, "correct": [5, 7, 9], "total": [10, 10, 10]}]})
    >>> m = compute_metrics(log, windows=[2])
    >>> [round(v, 4) for v in m.metrics["acc"]], m.metrics["mica"], m.metrics["min_acc"]
    ([0.85, 0.75], [0.8, 0.5], [None, 0.4])
    >>> m.evidence["mica"][1]["class"], round(m.metrics["wf2"], 4), m.reasons["fwt_lifetime"][:31]
    (0, 0.225, 'needs future tasks evaluated at')
    """
    checked_windows, w = _check_options(task_accuracy, windows, weights, epsilon, confidence)
    a = _arrays(log, task_accuracy)
    b = None if baseline is None else _baseline_arrays(a, baseline)
    K, F = a.n_tasks, a.finished_tasks
    ctx = steps.MetricContext(a, weights=w, epsilon=float(epsilon), confidence=confidence, baseline=b)
    for metric_id in metric_ids(checked_windows):
        _compute_one(ctx, metric_id)
    notes = _notes(ctx)
    lcb_final = ctx.lcb[F - 1] if ctx.lcb is not None and F else None
    return MetricsResult(
        metrics=ctx.metrics,
        reasons=ctx.reasons,
        evidence=ctx.evidence,
        notes=notes,
        task_accuracy=task_accuracy,
        windows=checked_windows,
        confidence=confidence,
        weights=w.tolist(),
        epsilon=float(epsilon),
        n_tasks=K,
        n_classes=a.n_classes,
        finished_tasks=F,
        classes=_class_stats(a, confidence, lcb_final, ctx.minima),
        class_deltas=ctx.class_deltas,
        pooled_classes=_pooled_classes(a),
        meta=a.meta,
    )


def _compute_one(ctx: steps.MetricContext, metric_id: str) -> None:
    """One id into ``ctx``: its value (null when a need or the fewest finished tasks is not met), the
    reason of a null and its evidence."""
    K, F = ctx.a.n_tasks, ctx.a.finished_tasks
    info = metric_info(metric_id)
    unmet = next((need for need in steps.NEED_REASONS if need in info.own_needs and not ctx.has(need)), None)
    if unmet is not None:
        outcome = steps.Outcome(None, reason=steps.NEED_REASONS[unmet])
    elif info.min_tasks > F:
        outcome = steps.Outcome(None, reason=steps.too_few_tasks(F, info.min_tasks))
    else:
        assert info.compute is not None, metric_id  # only cl_stability has none, and it needs runs
        outcome = info.compute(ctx)
    if info.shape == "per_task":
        value: MetricValue = [None] * K if outcome.value is None else _per_task(outcome.value, F)
    else:
        value = None if outcome.value is None else _num(outcome.value)
    ctx.metrics[metric_id] = value
    if _is_null(value):
        ctx.reasons[metric_id] = outcome.reason or (
            "undefined for this log" if info.shape == "scalar" else _per_task_reason(F)
        )
    if outcome.evidence is not None:
        ctx.evidence[metric_id] = outcome.evidence


def _notes(ctx: steps.MetricContext) -> dict[str, str]:
    """Notes on the whole result (evaluated at task ends only, partial log); a partial log's scalars
    become null (a scalar describes the whole run)."""
    a = ctx.a
    K, F = a.n_tasks, a.finished_tasks
    notes: dict[str, str] = {}
    if F and not a.continual:
        for metric_id in ctx.metrics:
            if "continual" in metric_info(metric_id).needs:
                notes[metric_id] = CONTINUAL_NOTE
    if F < K:
        notes["partial"] = (
            f"partial log: {F} of {K} tasks finished; per-task values after task {F} are null and "
            "so are the scalars (a scalar describes the whole run)"
        )
        for metric_id, value in ctx.metrics.items():
            if value is not None and not isinstance(value, list):
                ctx.metrics[metric_id] = None
                ctx.reasons[metric_id] = f"partial log: {F} of {K} tasks finished (a scalar needs every task)"
    return notes


def _num(x: Any) -> float | None:
    return steps.num(x)


def _per_task(values: np.ndarray, finished: int) -> list[float | None]:
    return [_num(v) if k < finished else None for k, v in enumerate(values)]


def _per_task_reason(finished: int) -> str:
    return steps.NO_TASK if finished == 0 else "needs at least 2 finished tasks (undefined at k = 1)"


def _is_null(value: MetricValue) -> bool:
    return value is None or (isinstance(value, list) and all(v is None for v in value))


def _baseline_arrays(a: LogArrays, baseline: LogLike) -> LogArrays:
    """The baseline's arrays, checked to cover the same classes as the log's."""
    b = (
        baseline if isinstance(baseline, LogArrays) else _arrays(baseline, "macro", "baseline")
    )  # class finals only
    if b.n_classes != a.n_classes:
        raise ValueError(
            f"baseline: has {b.n_classes} classes, the log has {a.n_classes} (same classes needed)"
        )
    if b.class_names != a.class_names:
        raise ValueError("baseline: class names differ from the log's (same classes, same ids needed)")
    if not _same_cells(a, b):
        raise ValueError(
            "baseline: its scenario or class_of differs from the log's (an NI/NIC log compares only with "
            "a log over the same cells)"
        )
    return b


def _pooled_classes(a: LogArrays) -> list[PooledClass] | None:
    """NI/NIC logs: every class over its cells learned by the last task end (counts pooled); ``None`` in
    an NC log."""
    if a.class_of is None or a.column_class is None:
        return None
    F = a.finished_tasks
    learned = a.class_task < F
    e = int(a.task_end_idx[-1]) if F else -1
    out = []
    for c in range(int(a.class_of.max()) + 1):  # one record per class (output, not a hot path)
        cells = np.flatnonzero((a.class_of == c) & learned)
        correct: int | None = None
        total: int | None = None
        if a.correct is not None and a.total is not None and len(cells):
            correct, total = int(a.correct[e, cells].sum()), int(a.total[e, cells].sum())
        name = a.column_class[int(np.flatnonzero(a.class_of == c)[0])]
        out.append(
            PooledClass(
                id=c,
                name=name,
                cells=[a.class_names[i] for i in cells],
                final_accuracy=correct / total if correct is not None and total else None,
                final_correct=correct,
                final_total=total,
            )
        )
    return out


def _same_cells(a: LogArrays, b: LogArrays) -> bool:
    """Whether two logs have the same scenario and map their columns to the same classes."""
    if a.scenario != b.scenario or (a.class_of is None) != (b.class_of is None):
        return False
    return a.class_of is None or b.class_of is None or bool(np.array_equal(a.class_of, b.class_of))


def _class_stats(
    a: LogArrays, confidence: float, lcb_final: np.ndarray | None, minima: fn.ClassMinima
) -> list[ClassStats]:
    F, C = a.finished_tasks, a.n_classes
    learned = a.class_task < F
    final = a.r[F - 1] if F else np.full(C, np.nan)
    if F:
        low = minima.value[F - 1]
        low_point = fn.first_point_of_minimum(
            a.class_acc, a.task_end_idx, minima.segment[F - 1], np.arange(C), low
        )
    else:
        low, low_point = np.full(C, np.nan), np.full(C, -1)
    low_lcb = None
    if a.correct is not None and a.total is not None and F:
        rows = np.maximum(low_point, 0)
        low_lcb = wilson_interval(
            a.correct[rows, np.arange(C)], a.total[rows, np.arange(C)], confidence=confidence
        )[0]
    correct, total = (a.correct, a.total) if F else (None, None)
    e = int(a.task_end_idx[-1]) if F else -1
    stats = []
    for c in range(C):  # building output records, one per class (not a metric hot path)
        ok = bool(learned[c])
        has_low = ok and low_point[c] >= 0
        stats.append(
            ClassStats(
                id=c,
                name=a.class_names[c],
                task=int(a.class_task[c]) + 1,
                final_accuracy=_num(final[c]) if ok else None,
                final_correct=int(correct[e, c])
                if ok and correct is not None and total is not None
                else None,
                final_total=int(total[e, c]) if ok and correct is not None and total is not None else None,
                final_lcb=_num(lcb_final[c]) if ok and lcb_final is not None else None,
                min_after_learned=float(low[c]) if has_low else None,
                min_after_learned_iteration=int(a.iterations[low_point[c]]) if has_low else None,
                min_after_learned_lcb=_num(low_lcb[c]) if has_low and low_lcb is not None else None,
                of_class=a.column_class[c] if a.column_class is not None else None,
                group=a.column_group[c] if a.column_group is not None else None,
            )
        )
    return stats


# ---------------------------------------------------------------------------------------------- runs
def compute_runs(
    logs: Sequence[LogLike],
    *,
    task_accuracy: Literal["macro", "micro"] = "macro",
    windows: Sequence[int] = (10, 100),
    weights: Sequence[float] | None = None,
    epsilon: float = 1.0,
    baseline: LogLike | None = None,
    confidence: float = 0.95,
) -> RunsResult:
    """Several runs (seeds) of one job: every run's metrics, their mean / std / worst, and ``cl_stability``.

    ``std`` is the sample standard deviation (ddof = 1; null for one run); ``worst`` is the minimum of a
    higher-is-better metric and the maximum otherwise. Per-task metrics aggregate element-wise; a
    position that is null in any run is null in the aggregate (and ``reasons`` says so).
    ``cl_stability = 1 - Σ w_i stddev(c_i)`` over the runs' cl_score criteria (Díaz-Rodríguez eq. 9).

    >>> from clgate.schemas import EvaluationLog
    >>> def run(x):
    ...     return EvaluationLog.parse({"tasks": [[0]], "points": [
    ...         {"iteration": 1, "task": 1, "task_end": True, "accuracy": [x]}]})
    >>> res = compute_runs([run(0.8), run(0.6)])
    >>> res.metrics["acc"], res.aggregates["acc"].worst, round(res.aggregates["acc"].std[0], 4)
    ([0.7], [0.6], 0.1414)
    """
    if isinstance(logs, (EvaluationLog, LogArrays)) or len(logs) == 0:
        raise ValueError("logs: give a non-empty sequence of logs (one per run)")
    options: dict[str, Any] = {
        "task_accuracy": task_accuracy,
        "windows": windows,
        "weights": weights,
        "epsilon": epsilon,
        "baseline": baseline,
        "confidence": confidence,
    }
    arrays = [_arrays(log, task_accuracy, f"logs[{i}]") for i, log in enumerate(logs)]
    first = arrays[0]
    for i, x in enumerate(arrays[1:], start=1):
        if (
            x.n_classes != first.n_classes
            or any(len(t) != len(u) or np.any(t != u) for t, u in zip(x.tasks, first.tasks, strict=False))
            or x.n_tasks != first.n_tasks
        ):
            raise ValueError(
                f"logs[{i}]: runs of one job must share the task split; its tasks differ from logs[0]'s"
            )
        if not _same_cells(x, first):
            raise ValueError(
                f"logs[{i}]: its scenario or class_of differs from logs[0]'s (same cells needed)"
            )
    runs = [compute_metrics(x, **options) for x in arrays]
    _, w = _check_options(task_accuracy, windows, weights, epsilon, confidence)
    aggregates: dict[str, Aggregate] = {}
    metrics: dict[str, MetricValue] = {}
    reasons: dict[str, str] = {}
    for metric_id in runs[0].metrics:
        if metric_id == "cl_stability":
            continue
        agg, reason = _aggregate(metric_id, [r.metrics[metric_id] for r in runs], runs)
        aggregates[metric_id] = agg
        metrics[metric_id] = agg.mean
        if reason:
            reasons[metric_id] = reason
    criteria = np.array(
        [[np.nan if r.metrics[c] is None else r.metrics[c] for c in CL_CRITERIA] for r in runs]
    )
    used = w != 0
    if len(runs) < 2:
        stability, why = None, steps.NEED_REASONS["runs"]
    elif np.isnan(criteria[:, used]).any():
        bad = sorted({CL_CRITERIA[j] for j in np.flatnonzero(used & np.isnan(criteria).any(axis=0))})
        stability, why = None, "needs every weighted criterion in every run; null: " + ", ".join(bad)
    else:
        stability, why = fn.cl_stability(criteria, w), ""
    metrics["cl_stability"] = _num(stability) if stability is not None else None
    if metrics["cl_stability"] is None:
        reasons["cl_stability"] = why or "undefined"
    ordered = {mid: metrics[mid] for mid in runs[0].metrics}
    return RunsResult(metrics=ordered, aggregates=aggregates, runs=runs, reasons=reasons)


def _aggregate(metric_id: str, values: list[MetricValue], runs: list[MetricsResult]) -> tuple[Aggregate, str]:
    per_task = isinstance(values[0], list)
    rows = [cast("list[Any]", v) if per_task else [v] for v in values]
    x = np.array([[np.nan if e is None else e for e in row] for row in rows], dtype=float)
    defined: np.ndarray = ~np.isnan(x).any(axis=0)
    n = x.shape[0]
    higher = metric_info(metric_id).higher_is_better
    with np.errstate(invalid="ignore"):
        mean = x.mean(axis=0)
        std = x.std(axis=0, ddof=1) if n > 1 else np.full(x.shape[1], np.nan)
        worst = x.min(axis=0) if higher else x.max(axis=0)

    def pack(v: np.ndarray) -> MetricValue:
        cells = [_num(e) if d else None for e, d in zip(v, defined, strict=True)]
        return cells if per_task else cells[0]

    reason = ""
    partly = defined.sum() < np.any(~np.isnan(x), axis=0).sum()
    if not defined.any():
        first = next((r.reasons[metric_id] for r in runs if metric_id in r.reasons), "undefined")
        reason = first
    elif partly:
        reason = "null where some run has no value"
    return Aggregate(mean=pack(mean), std=pack(std), worst=pack(worst)), reason


__all__ = ["compute_metrics", "compute_runs"]
