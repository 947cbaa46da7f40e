"""Every metric of ``shared/spec/metrics.md`` for one log (:func:`compute_metrics`) or several runs
(:func:`compute_runs`), with the reason of every ``null``, the evidence behind every worst case, and
per-class statistics.

Scope: per-task lists have K entries, ``null`` after the last finished task. Scalars describe the whole
run: for a partial log (F < K finished tasks) every scalar is ``null`` with the reason, never a value
computed on the finished tasks only (a gate would judge a run it did not see).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from clgate.metrics import functional as fn
from clgate.metrics.arrays import LogArrays, TaskAccuracy, wilson_interval
from clgate.metrics.registry import CL_CRITERIA, check_window, metric_ids, metric_info
from clgate.schemas.evaluation_log import EvaluationLog
from clgate.schemas.metrics import Aggregate, ClassStats, MetricsResult, MetricValue, RunsResult

LogLike = EvaluationLog | LogArrays

CONTINUAL_NOTE = (
    "the log has no evaluation point between task ends: computed from the task-end points only, "
    "so a stability gap between task ends cannot show"
)


# ---------------------------------------------------------------------------------------------- options
def _check_options(
    task_accuracy: str, windows: Sequence[int], weights: Sequence[float] | None, epsilon: float, confidence: float
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


# ---------------------------------------------------------------------------------------------- helpers
def _num(x: Any) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def _per_task(values: np.ndarray, finished: int) -> list[float | None]:
    return [_num(v) if k < finished else None for k, v in enumerate(values)]


class _Result:
    """Collects values, reasons, evidence and notes while the metrics are computed."""

    def __init__(self, a: LogArrays) -> None:
        self.a = a
        self.metrics: dict[str, MetricValue] = {}
        self.reasons: dict[str, str] = {}
        self.evidence: dict[str, list[dict | None] | dict] = {}
        self.notes: dict[str, str] = {}

    def scalar(self, metric_id: str, value: float | None, reason: str | None = None) -> None:
        value = None if value is None else _num(value)
        self.metrics[metric_id] = value
        if value is None:
            self.reasons[metric_id] = reason or "undefined for this log"

    def per_task(self, metric_id: str, values: np.ndarray) -> None:
        self.metrics[metric_id] = _per_task(values, self.a.finished_tasks)

    def point(self, p: int) -> dict[str, int]:
        return {"point": int(p), "iteration": int(self.a.iterations[p])}

    def cls(self, c: int) -> dict[str, Any]:
        return {"class": int(c), "class_name": self.a.class_names[c], "task": int(self.a.class_task[c]) + 1}


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

    >>> from schemas import EvaluationLog
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
    K, F, H = a.n_tasks, a.finished_tasks, a.horizon
    out = _Result(a)
    ends = a.task_end_idx
    Rf = a.R[:F, :F]
    no_task = "no task finished (partial log without a task end)"

    # ---- Konaté et al.
    acc = fn.average_accuracy(a.R)
    out.per_task("acc", acc)
    mica = fn.minimal_class_accuracy(a.r, a.class_task)
    out.per_task("mica", mica.value)
    out.evidence["mica"] = [
        {**out.cls(c), "value": _num(v)} if k < F and c >= 0 else None
        for k, (v, c) in enumerate(zip(mica.value, mica.cls))
    ]
    mica_old = fn.minimal_class_accuracy(a.r, a.class_task, old_only=True)
    out.per_task("mica_old", mica_old.value)
    out.evidence["mica_old"] = [
        {**out.cls(c), "value": _num(v)} if k < F and c >= 0 else None
        for k, (v, c) in enumerate(zip(mica_old.value, mica_old.cls))
    ]
    out.scalar("wamica", fn.wamica(mica.value[:F]) if F else None, no_task)

    # ---- Michel et al.
    af = fn.average_forgetting(a.R)
    out.per_task("af", af)
    out.per_task("raa", fn.rescaled_average_accuracy(acc, a.task_sizes))
    out.per_task("raf", fn.rescaled_average_forgetting(af, a.task_sizes))

    # ---- Díaz-Rodríguez et al. (and Lopez-Paz & Ranzato's BWT)
    one_task = "needs at least 2 finished tasks" if F else no_task
    out.scalar("bwt", fn.backward_transfer(Rf) if F >= 2 else None, one_task)
    out.scalar("a_lifetime", fn.lifetime_accuracy(Rf) if F else None, no_task)
    bwt_l = fn.lifetime_backward_transfer(Rf) if F >= 2 else None
    out.scalar("bwt_lifetime", bwt_l, one_task)
    out.scalar("rem", None if bwt_l is None else 1.0 - abs(min(bwt_l, 0.0)), one_task)
    out.scalar("bwt_plus", None if bwt_l is None else max(bwt_l, 0.0), one_task)
    out.scalar("fwt_lifetime", *_fwt(a, Rf))
    _resources(out, a, epsilon)
    criteria = [out.metrics[c] for c in CL_CRITERIA]
    missing = [c for c, v, wi in zip(CL_CRITERIA, criteria, w) if v is None and wi != 0]
    if missing:
        out.scalar("cl_score", None, "needs every criterion with a non-zero weight; null: " + ", ".join(
            f"{c} ({out.reasons.get(c, 'undefined')})" for c in missing))
    else:
        out.scalar("cl_score", fn.cl_score(np.array([np.nan if v is None else v for v in criteria]), w))
    out.scalar("cl_stability", None, "needs several runs (seeds) of the same job: give several logs")

    # ---- De Lange et al.
    out.per_task("forg", fn.forgetting(a.R))
    min_acc, run = fn.min_accuracy(a.task_acc, ends, K)
    out.per_task("min_acc", min_acc)
    out.evidence["min_acc"] = [
        {"tasks": [
            {"task": i + 1, "min": _num(run.value[ends[k], i]), **out.point(run.row[ends[k], i])} for i in range(k)
        ]} if 1 <= k < F else None
        for k in range(K)
    ]
    if F:
        curve = fn.worst_case_accuracy_curve(a.task_acc[:H], a.point_task[:H], ends)
        p = int(ends[-1])
        out.scalar("wc_acc", curve[p], "undefined at the last task end")
        out.evidence["wc_acc"] = {
            **out.point(p), "task": F, "current_task_accuracy": _num(a.task_acc[p, F - 1]),
            "min_acc": _num(min_acc[F - 1]) if F > 1 else None,
        }
    else:
        out.scalar("wc_acc", None, no_task)
    minima = fn.class_minima_after_learning(a.class_acc, a.class_task, ends)
    _min_class_acc(out, a, minima)
    for win in checked_windows:
        ext = fn.windowed_extremes(a.task_acc, a.task_start_idx, H, F, win)
        for prefix, value, first, second in (
            ("wf", ext.forgetting, ext.forgetting_from, ext.forgetting_to),
            ("wp", ext.plasticity, ext.plasticity_from, ext.plasticity_to),
        ):
            metric_id = f"{prefix}{win}"
            out.scalar(metric_id, float(np.mean(value)) if F else None, no_task)
            out.evidence[metric_id] = {"window": win, "tasks": [
                {"task": i + 1, "value": float(value[i]),
                 "from_point": int(first[i]) if first[i] >= 0 else None,
                 "from_iteration": int(a.iterations[first[i]]) if first[i] >= 0 else None,
                 "to_point": int(second[i]) if second[i] >= 0 else None,
                 "to_iteration": int(a.iterations[second[i]]) if second[i] >= 0 else None}
                for i in range(F)
            ]}

    # ---- clgate extensions
    lcb_final = None
    if a.correct is not None and a.total is not None:
        lcb_r = np.full((K, a.n_classes), np.nan)
        lcb_r[:F] = wilson_interval(a.correct[ends], a.total[ends], confidence=confidence)[0]
        lcb = fn.minimal_class_accuracy(lcb_r, a.class_task)
        out.per_task("mica_lcb", lcb.value)
        out.evidence["mica_lcb"] = [
            {**out.cls(c), "lcb": _num(v), "correct": int(a.correct[ends[k], c]), "total": int(a.total[ends[k], c])}
            if k < F and c >= 0 else None
            for k, (v, c) in enumerate(zip(lcb.value, lcb.cls))
        ]
        lcb_final = lcb_r[F - 1] if F else None
    else:
        out.metrics["mica_lcb"] = [None] * K
        out.reasons["mica_lcb"] = "needs correct/total counts; the log gives accuracies only"
    deltas = _baseline(out, a, baseline)

    # ---- notes
    if F and not a.continual:
        for metric_id in out.metrics:
            if "continual" in metric_info(metric_id).needs:
                out.notes[metric_id] = CONTINUAL_NOTE
    if F < K:
        out.notes["partial"] = (
            f"partial log: {F} of {K} tasks finished; per-task values after task {F} are null and "
            "so are the scalars (a scalar describes the whole run)"
        )
        for metric_id, value in out.metrics.items():
            if value is not None and not isinstance(value, list):
                out.metrics[metric_id] = None
                out.reasons[metric_id] = f"partial log: {F} of {K} tasks finished (a scalar needs every task)"

    ordered = {mid: out.metrics[mid] for mid in metric_ids(checked_windows)}
    for mid, value in ordered.items():
        if _is_null(value) and mid not in out.reasons:
            out.reasons[mid] = no_task if F == 0 else "needs at least 2 finished tasks (undefined at k = 1)"
    return MetricsResult(
        metrics=ordered,
        reasons={mid: out.reasons[mid] for mid in ordered if mid in out.reasons and _is_null(ordered[mid])},
        evidence=out.evidence,
        notes=out.notes,
        task_accuracy=task_accuracy,
        windows=checked_windows,
        confidence=confidence,
        weights=w.tolist(),
        epsilon=float(epsilon),
        n_tasks=K,
        n_classes=a.n_classes,
        finished_tasks=F,
        classes=_class_stats(a, confidence, lcb_final, minima),
        class_deltas=deltas,
        meta=a.meta,
    )


def _is_null(value: MetricValue) -> bool:
    return value is None or (isinstance(value, list) and all(v is None for v in value))


def _fwt(a: LogArrays, Rf: np.ndarray) -> tuple[float | None, str]:
    F = Rf.shape[0]
    if F < 2:
        return None, "needs at least 2 finished tasks" if F else "no task finished (partial log without a task end)"
    if a.meta.get("predict_over") == "seen" and a.meta.get("future_tasks"):
        return None, (
            "the model predicted over the seen classes only (meta.predict_over: seen): a future task scores 0 "
            "by construction, so forward transfer is not measured (evaluate with predict_over: all)"
        )
    upper = np.triu(np.ones((F, F), dtype=bool), 1)
    holes = np.argwhere(upper & np.isnan(Rf))
    if len(holes):
        i, j = (int(x) + 1 for x in holes[0])
        return None, (
            f"needs future tasks evaluated at task ends (R[i][j], i < j); e.g. task {j} was not evaluated "
            f"at the end of task {i} ({len(holes)} of {int(upper.sum())} entries missing)"
        )
    return fn.lifetime_forward_transfer(Rf), ""


def _resources(out: _Result, a: LogArrays, epsilon: float) -> None:
    F = a.finished_tasks
    if a.resources is None:
        for metric_id in ("ms", "sss", "ce"):
            out.scalar(metric_id, None, "needs resources (model_params, buffer_bytes, train_bytes, ops) per task")
        return
    if F == 0:
        for metric_id in ("ms", "sss", "ce"):
            out.scalar(metric_id, None, "no task finished (partial log without a task end)")
        return
    res = {name: values[:F] for name, values in a.resources.items()}
    out.scalar("ms", fn.model_size_efficiency(res["model_params"]))
    out.scalar("sss", fn.samples_storage_efficiency(res["buffer_bytes"], res["train_bytes"]),
               "train_bytes sum to 0: the storage ratio is undefined")
    out.scalar("ce", fn.computational_efficiency(res["ops_pass"], res["ops_train"], epsilon=epsilon),
               "ops_train is 0 for some task: the efficiency ratio is undefined")


def _min_class_acc(out: _Result, a: LogArrays, minima: fn.ClassMinima) -> None:
    K, F = a.n_tasks, a.finished_tasks
    values = np.full(K, np.nan)
    evidence: list[dict | None] = [None] * K
    if F >= 2:
        cand = np.where(np.isnan(minima.value[1:]), np.inf, minima.value[1:])  # tasks 2 … F; only old classes
        cls = np.argmin(cand, axis=1)
        rows = np.arange(1, F)
        best = cand[rows - 1, cls]
        ok = np.isfinite(best)
        values[rows[ok]] = best[ok]
        points = fn.first_point_of_minimum(
            a.class_acc, a.task_end_idx, np.where(ok, minima.segment[rows, cls], -1), cls, best
        )
        for k, c, v, p in zip(rows[ok], cls[ok], best[ok], points[ok]):  # loop over tasks: evidence records
            evidence[int(k)] = {**out.cls(int(c)), "value": float(v), **out.point(int(p))}
    out.per_task("min_class_acc", values)
    out.evidence["min_class_acc"] = evidence


def _class_stats(
    a: LogArrays, confidence: float, lcb_final: np.ndarray | None, minima: fn.ClassMinima
) -> list[ClassStats]:
    F, C = a.finished_tasks, a.n_classes
    learned = a.class_task < F
    final = a.r[F - 1] if F else np.full(C, np.nan)
    if F:
        low = minima.value[F - 1]
        low_point = fn.first_point_of_minimum(a.class_acc, a.task_end_idx, minima.segment[F - 1], np.arange(C), low)
    else:
        low, low_point = np.full(C, np.nan), np.full(C, -1)
    low_lcb = None
    if a.correct is not None and a.total is not None and F:
        rows = np.maximum(low_point, 0)
        low_lcb = wilson_interval(a.correct[rows, np.arange(C)], a.total[rows, np.arange(C)], confidence=confidence)[0]
    counts = a.correct is not None and a.total is not None and F
    e = int(a.task_end_idx[-1]) if F else -1
    stats = []
    for c in range(C):  # building output records, one per class (not a metric hot path)
        ok = bool(learned[c])
        has_low = ok and low_point[c] >= 0
        stats.append(ClassStats(
            id=c, name=a.class_names[c], task=int(a.class_task[c]) + 1,
            final_accuracy=_num(final[c]) if ok else None,
            final_correct=int(a.correct[e, c]) if ok and counts else None,
            final_total=int(a.total[e, c]) if ok and counts else None,
            final_lcb=_num(lcb_final[c]) if ok and lcb_final is not None else None,
            min_after_learned=float(low[c]) if has_low else None,
            min_after_learned_iteration=int(a.iterations[low_point[c]]) if has_low else None,
            min_after_learned_lcb=_num(low_lcb[c]) if has_low and low_lcb is not None else None,
        ))
    return stats


def _baseline(out: _Result, a: LogArrays, baseline: LogLike | None) -> list[float | None] | None:
    if baseline is None:
        out.scalar("class_regression", None, "needs a baseline log over the same classes")
        return None
    b = baseline if isinstance(baseline, LogArrays) else _arrays(baseline, "macro", "baseline")  # class finals only
    if b.n_classes != a.n_classes:
        raise ValueError(f"baseline: has {b.n_classes} classes, the log has {a.n_classes} (same classes needed)")
    if b.class_names != a.class_names:
        raise ValueError("baseline: class names differ from the log's (same classes, same ids needed)")
    unfinished = [name for name, x in (("log", a), ("baseline", b)) if x.finished_tasks < x.n_tasks]
    if unfinished:
        out.scalar("class_regression", None,
                   f"final class accuracies need complete logs; {' and '.join(unfinished)} not finished")
        return None
    cand, base = a.r[a.finished_tasks - 1], b.r[b.finished_tasks - 1]
    value, c = fn.class_regression(base, cand)
    out.scalar("class_regression", value)
    out.evidence["class_regression"] = {**out.cls(c), "baseline": float(base[c]), "candidate": float(cand[c])}
    return [_num(x) for x in cand - base]


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

    >>> from schemas import EvaluationLog
    >>> def run(x):
    ...     return EvaluationLog.parse({"tasks": [[0]], "points": [
    ...         {"iteration": 1, "task": 1, "task_end": True, "accuracy": [x]}]})
    >>> res = compute_runs([run(0.8), run(0.6)])
    >>> res.metrics["acc"], res.aggregates["acc"].worst, round(res.aggregates["acc"].std[0], 4)
    ([0.7], [0.6], 0.1414)
    """
    if isinstance(logs, (EvaluationLog, LogArrays)) or len(logs) == 0:
        raise ValueError("logs: give a non-empty sequence of logs (one per run)")
    options = {"task_accuracy": task_accuracy, "windows": windows, "weights": weights, "epsilon": epsilon,
                   "baseline": baseline, "confidence": confidence}
    arrays = [_arrays(log, task_accuracy, f"logs[{i}]") for i, log in enumerate(logs)]
    first = arrays[0]
    for i, x in enumerate(arrays[1:], start=1):
        if x.n_classes != first.n_classes or any(
            len(t) != len(u) or np.any(t != u) for t, u in zip(x.tasks, first.tasks)
        ) or x.n_tasks != first.n_tasks:
            raise ValueError(f"logs[{i}]: runs of one job must share the task split; its tasks differ from logs[0]'s")
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
    criteria = np.array([[np.nan if r.metrics[c] is None else r.metrics[c] for c in CL_CRITERIA] for r in runs])
    used = w != 0
    if len(runs) < 2:
        stability, why = None, "needs several runs (seeds) of the same job: give several logs"
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
    rows = [v if per_task else [v] for v in values]
    x = np.array([[np.nan if e is None else e for e in row] for row in rows], dtype=float)
    defined = ~np.isnan(x).any(axis=0)
    n = x.shape[0]
    higher = metric_info(metric_id).higher_is_better
    with np.errstate(invalid="ignore"):
        mean = x.mean(axis=0)
        std = x.std(axis=0, ddof=1) if n > 1 else np.full(x.shape[1], np.nan)
        worst = x.min(axis=0) if higher else x.max(axis=0)

    def pack(v: np.ndarray) -> MetricValue:
        cells = [_num(e) if d else None for e, d in zip(v, defined)]
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
