"""One small function per metric id: what :func:`~clgate.metrics.compute_metrics` runs for each id.

The registry (:mod:`clgate.metrics.registry`) points every id at its function here; ``compute_metrics``
is a loop over the ids that first checks the entry's needs and fewest finished tasks (the reason of a
``null`` comes from there), then calls the function. A function sees a :class:`MetricContext`: the log's
arrays, the options, the values computed so far, and intermediate results shared by several ids (the
task-end matrix, MICA, the class minima, …) computed once on first use.

A function returns an :class:`Outcome`: the raw value (an array of K per-task values or a scalar),
optional evidence, and the reason to report should the value turn out undefined (NaN).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cached_property
from typing import Any, NamedTuple

import numpy as np

from clgate.metrics import functional as fn
from clgate.metrics.arrays import LogArrays, wilson_interval

NO_TASK = "no task finished (partial log without a task end)"
"""Reason of a null when no task has finished (a partial log without any task end)."""


NEED_REASONS: dict[str, str] = {
    "runs": "needs several runs (seeds) of the same job: give several logs",
    "baseline": "needs a baseline log over the same classes",
    "counts": "needs correct/total counts; the log gives accuracies only",
    "resources": "needs resources (model_params, buffer_bytes, train_bytes, ops) per task",
    "future_tasks": "needs future tasks evaluated at task ends (R[i][j], i < j)",
}
"""Reason of a null for each hard need of the registry that the inputs do not meet, in the order they are
checked (:meth:`MetricContext.has` says whether one is met)."""


def too_few_tasks(finished: int, needed: int) -> str:
    """Reason of a null when fewer than ``needed`` tasks have finished."""
    return NO_TASK if finished == 0 else f"needs at least {needed} finished tasks"


def num(x: Any) -> float | None:
    """``x`` as a float, or ``None`` when it is not finite."""
    x = float(x)
    return x if math.isfinite(x) else None


class Outcome(NamedTuple):
    """What one metric function returns (see the module docstring)."""

    value: Any
    evidence: Any = None
    reason: str | None = None


class MetricContext:
    """The inputs of the metric functions, the results so far, and shared intermediates (computed once)."""

    def __init__(
        self,
        a: LogArrays,
        *,
        weights: np.ndarray,
        epsilon: float,
        confidence: float,
        baseline: LogArrays | None,
    ) -> None:
        self.a = a
        self.weights = weights
        self.epsilon = epsilon
        self.confidence = confidence
        self.baseline = baseline
        self.metrics: dict[str, Any] = {}
        self.reasons: dict[str, str] = {}
        self.evidence: dict[str, Any] = {}
        self._windowed: dict[int, fn.Windowed] = {}

    # ---- what the log has (hard needs of the registry)
    def has(self, need: str) -> bool:
        """Whether the inputs meet one need of the registry (``future_tasks`` is judged by its metric)."""
        a = self.a
        return {
            "counts": a.correct is not None and a.total is not None,
            "resources": a.resources is not None,
            "baseline": self.baseline is not None,
            "runs": False,  # one log is one run; compute_runs handles several
            "future_tasks": True,
            "continual": True,
        }[need]

    # ---- evidence records
    def point(self, p: int) -> dict[str, int]:
        return {"point": int(p), "iteration": int(self.a.iterations[p])}

    def cls(self, c: int) -> dict[str, Any]:
        a = self.a
        return {"class": int(c), "class_name": a.class_names[c], "task": int(a.class_task[c]) + 1}

    def class_evidence(self, worst: fn.ClassExtreme) -> list[dict | None]:
        F = self.a.finished_tasks
        return [
            {**self.cls(c), "value": num(v)} if k < F and c >= 0 else None
            for k, (v, c) in enumerate(zip(worst.value, worst.cls, strict=True))
        ]

    # ---- shared intermediates
    @property
    def finished(self) -> int:
        return self.a.finished_tasks

    @cached_property
    def Rf(self) -> np.ndarray:  # the spec's name of the task-end matrix
        F = self.a.finished_tasks
        return self.a.R[:F, :F]

    @cached_property
    def acc(self) -> np.ndarray:
        return fn.average_accuracy(self.a.R)

    @cached_property
    def mica(self) -> fn.ClassExtreme:
        return fn.minimal_class_accuracy(self.a.r, self.a.class_task)

    @cached_property
    def af(self) -> np.ndarray:
        return fn.average_forgetting(self.a.R)

    @cached_property
    def bwt_lifetime(self) -> float:
        return fn.lifetime_backward_transfer(self.Rf)

    @cached_property
    def min_acc(self) -> tuple[np.ndarray, fn.RunningMin]:
        return fn.min_accuracy(self.a.task_acc, self.a.task_end_idx, self.a.n_tasks)

    @cached_property
    def minima(self) -> fn.ClassMinima:
        a = self.a
        return fn.class_minima_after_learning(a.class_acc, a.class_task, a.task_end_idx)

    @cached_property
    def lcb(self) -> np.ndarray | None:
        """Wilson lower bounds of the class accuracies at the task ends (K × C; NaN after F), or None."""
        a = self.a
        if a.correct is None or a.total is None:
            return None
        lcb_r = np.full((a.n_tasks, a.n_classes), np.nan)
        ends = a.task_end_idx
        lcb_r[: a.finished_tasks] = wilson_interval(
            a.correct[ends], a.total[ends], confidence=self.confidence
        )[0]
        return lcb_r

    def windowed(self, window: int) -> fn.Windowed:
        if window not in self._windowed:
            a = self.a
            self._windowed[window] = fn.windowed_extremes(
                a.task_acc, a.task_start_idx, a.horizon, a.finished_tasks, window
            )
        return self._windowed[window]

    @cached_property
    def unfinished(self) -> list[str]:
        """Which of the log and the baseline are not complete (final class accuracies need both)."""
        pairs = (("log", self.a), ("baseline", self.baseline))
        return [name for name, x in pairs if x is not None and x.finished_tasks < x.n_tasks]

    @cached_property
    def class_deltas(self) -> list[float | None] | None:
        """Final class accuracy minus the baseline's, per class (None without a complete pair of logs)."""
        b = self.baseline
        if b is None or self.unfinished:
            return None
        return [num(x) for x in self.a.r[self.a.finished_tasks - 1] - b.r[b.finished_tasks - 1]]


# ------------------------------------------------------------------------------------------- Konaté et al.
def acc(ctx: MetricContext) -> Outcome:
    return Outcome(ctx.acc)


def mica(ctx: MetricContext) -> Outcome:
    return Outcome(ctx.mica.value, ctx.class_evidence(ctx.mica))


def mica_old(ctx: MetricContext) -> Outcome:
    worst = fn.minimal_class_accuracy(ctx.a.r, ctx.a.class_task, old_only=True)
    return Outcome(worst.value, ctx.class_evidence(worst))


def wamica(ctx: MetricContext) -> Outcome:
    return Outcome(fn.wamica(ctx.mica.value[: ctx.finished]), reason=NO_TASK)


# ------------------------------------------------------------------------------------------- Michel et al.
def af(ctx: MetricContext) -> Outcome:
    return Outcome(ctx.af)


def raa(ctx: MetricContext) -> Outcome:
    return Outcome(fn.rescaled_average_accuracy(ctx.acc, ctx.a.new_class_counts))


NO_NEW_CLASS = (
    "undefined while no task after the first brings a new class (NI): a random classifier forgets "
    "nothing there, so there is no chance level to rescale by"
)


def raf(ctx: MetricContext) -> Outcome:
    return Outcome(
        fn.rescaled_average_forgetting(ctx.af, ctx.a.new_class_counts),
        reason=NO_NEW_CLASS if ctx.a.finished_tasks > 1 else None,
    )


# ----------------------------------------------------------------------------------- Díaz-Rodríguez et al.
def bwt(ctx: MetricContext) -> Outcome:
    return Outcome(fn.backward_transfer(ctx.Rf), reason=too_few_tasks(ctx.finished, 2))


def a_lifetime(ctx: MetricContext) -> Outcome:
    return Outcome(fn.lifetime_accuracy(ctx.Rf), reason=NO_TASK)


def bwt_lifetime(ctx: MetricContext) -> Outcome:
    return Outcome(ctx.bwt_lifetime, reason=too_few_tasks(ctx.finished, 2))


def rem(ctx: MetricContext) -> Outcome:
    return Outcome(1.0 - abs(min(ctx.bwt_lifetime, 0.0)), reason=too_few_tasks(ctx.finished, 2))


def bwt_plus(ctx: MetricContext) -> Outcome:
    return Outcome(max(ctx.bwt_lifetime, 0.0), reason=too_few_tasks(ctx.finished, 2))


def fwt_lifetime(ctx: MetricContext) -> Outcome:
    Rf = ctx.Rf
    F = Rf.shape[0]
    if ctx.a.meta.get("predict_over") == "seen" and ctx.a.meta.get("future_tasks"):
        return Outcome(
            None,
            reason=(
                "the model predicted over the seen classes only (meta.predict_over: seen): a "
                "future task scores 0 "
                "by construction, so forward transfer is not measured (evaluate with predict_over: all)"
            ),
        )
    upper = np.triu(np.ones((F, F), dtype=bool), 1)
    holes = np.argwhere(upper & np.isnan(Rf))
    if len(holes):
        i, j = (int(x) + 1 for x in holes[0])
        return Outcome(
            None,
            reason=(
                f"{NEED_REASONS['future_tasks']}; e.g. task {j} was not evaluated "
                f"at the end of task {i} ({len(holes)} of {int(upper.sum())} entries missing)"
            ),
        )
    return Outcome(fn.lifetime_forward_transfer(Rf))


def _resources(ctx: MetricContext) -> dict[str, np.ndarray]:
    assert ctx.a.resources is not None  # the registry's need "resources" is checked before
    return {name: values[: ctx.finished] for name, values in ctx.a.resources.items()}


def ms(ctx: MetricContext) -> Outcome:
    return Outcome(fn.model_size_efficiency(_resources(ctx)["model_params"]))


def sss(ctx: MetricContext) -> Outcome:
    res = _resources(ctx)
    return Outcome(
        fn.samples_storage_efficiency(res["buffer_bytes"], res["train_bytes"]),
        reason="train_bytes sum to 0: the storage ratio is undefined",
    )


def ce(ctx: MetricContext) -> Outcome:
    res = _resources(ctx)
    return Outcome(
        fn.computational_efficiency(res["ops_pass"], res["ops_train"], epsilon=ctx.epsilon),
        reason="ops_train is 0 for some task: the efficiency ratio is undefined",
    )


def cl_score(ctx: MetricContext, *, criteria: Sequence[str]) -> Outcome:
    """The weighted criteria; null when a criterion with a non-zero weight is null (its reason is quoted)."""
    values = [ctx.metrics[c] for c in criteria]
    missing = [c for c, v, wi in zip(criteria, values, ctx.weights, strict=True) if v is None and wi != 0]
    if missing:
        return Outcome(
            None,
            reason="needs every criterion with a non-zero weight; null: "
            + ", ".join(f"{c} ({ctx.reasons.get(c, 'undefined')})" for c in missing),
        )
    return Outcome(fn.cl_score(np.array([np.nan if v is None else v for v in values]), ctx.weights))


# ----------------------------------------------------------------------------------------- De Lange et al.
def forg(ctx: MetricContext) -> Outcome:
    return Outcome(fn.forgetting(ctx.a.R))


def min_acc(ctx: MetricContext) -> Outcome:
    a, F = ctx.a, ctx.finished
    ends = a.task_end_idx
    values, run = ctx.min_acc
    evidence = [
        {
            "tasks": [
                {"task": i + 1, "min": num(run.value[ends[k], i]), **ctx.point(run.row[ends[k], i])}
                for i in range(k)
            ]
        }
        if 1 <= k < F
        else None
        for k in range(a.n_tasks)
    ]
    return Outcome(values, evidence)


def wc_acc(ctx: MetricContext) -> Outcome:
    a, F = ctx.a, ctx.finished
    ends = a.task_end_idx
    curve = fn.worst_case_accuracy_curve(a.task_acc[: a.horizon], a.point_task[: a.horizon], ends)
    p = int(ends[-1])
    evidence = {
        **ctx.point(p),
        "task": F,
        "current_task_accuracy": num(a.task_acc[p, F - 1]),
        "min_acc": num(ctx.min_acc[0][F - 1]) if F > 1 else None,
    }
    return Outcome(curve[p], evidence, "undefined at the last task end")


def min_class_acc(ctx: MetricContext) -> Outcome:
    a, K, F = ctx.a, ctx.a.n_tasks, ctx.finished
    minima = ctx.minima
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
        for k, c, v, p in zip(
            rows[ok], cls[ok], best[ok], points[ok], strict=True
        ):  # loop over tasks: evidence records
            evidence[int(k)] = {**ctx.cls(int(c)), "value": float(v), **ctx.point(int(p))}
    return Outcome(values, evidence)


def _windowed(ctx: MetricContext, window: int, forgetting: bool) -> Outcome:
    ext = ctx.windowed(window)
    if forgetting:
        value, first, second = ext.forgetting, ext.forgetting_from, ext.forgetting_to
    else:
        value, first, second = ext.plasticity, ext.plasticity_from, ext.plasticity_to
    iterations = ctx.a.iterations
    evidence = {
        "window": window,
        "tasks": [
            {
                "task": i + 1,
                "value": float(value[i]),
                "from_point": int(first[i]) if first[i] >= 0 else None,
                "from_iteration": int(iterations[first[i]]) if first[i] >= 0 else None,
                "to_point": int(second[i]) if second[i] >= 0 else None,
                "to_iteration": int(iterations[second[i]]) if second[i] >= 0 else None,
            }
            for i in range(ctx.finished)
        ],
    }
    return Outcome(float(np.mean(value)) if ctx.finished else None, evidence, NO_TASK)


def windowed_forgetting(ctx: MetricContext, *, window: int) -> Outcome:
    return _windowed(ctx, window, forgetting=True)


def windowed_plasticity(ctx: MetricContext, *, window: int) -> Outcome:
    return _windowed(ctx, window, forgetting=False)


# --------------------------------------------------------------------------------------- clgate extensions
def mica_lcb(ctx: MetricContext) -> Outcome:
    a, F = ctx.a, ctx.finished
    assert (
        ctx.lcb is not None and a.correct is not None and a.total is not None
    )  # need "counts" checked before
    lcb = fn.minimal_class_accuracy(ctx.lcb, a.class_task)
    ends = a.task_end_idx
    evidence = [
        {
            **ctx.cls(c),
            "lcb": num(v),
            "correct": int(a.correct[ends[k], c]),
            "total": int(a.total[ends[k], c]),
        }
        if k < F and c >= 0
        else None
        for k, (v, c) in enumerate(zip(lcb.value, lcb.cls, strict=True))
    ]
    return Outcome(lcb.value, evidence)


def class_regression(ctx: MetricContext) -> Outcome:
    b = ctx.baseline
    assert b is not None  # need "baseline" checked before
    if ctx.unfinished:
        return Outcome(
            None,
            reason=(
                f"final class accuracies need complete logs; {' and '.join(ctx.unfinished)} not finished"
            ),
        )
    a = ctx.a
    cand, base = a.r[a.finished_tasks - 1], b.r[b.finished_tasks - 1]
    value, c = fn.class_regression(base, cand)
    return Outcome(value, {**ctx.cls(c), "baseline": float(base[c]), "candidate": float(cand[c])})
