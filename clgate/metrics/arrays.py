"""The numpy tensors every metric reads, derived once from an :class:`~clgate.schemas.EvaluationLog`.

Notation of ``docs/evaluation-log.md``: ``P`` evaluation points, ``C`` classes, ``K`` tasks,
``F`` finished tasks (``F = K`` unless the log is ``partial``). Positions are 0-based; accuracies are
fractions in [0, 1]; ``NaN`` marks "not evaluated / undefined".
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from typing import Any, Literal

import numpy as np

from clgate.schemas.evaluation_log import EvaluationLog

TaskAccuracy = Literal["macro", "micro"]


def wilson_interval(correct: Any, total: Any, *, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval of a binomial proportion ``correct / total`` (element-wise).

    With ``p = correct / n`` and ``z`` the normal quantile of ``(1 + confidence) / 2``::

        centre = (p + z²/2n) / (1 + z²/n)
        half   = z / (1 + z²/n) · sqrt(p(1 - p)/n + z²/4n²)

    Source: E. B. Wilson, JASA 1927. Entries with ``total == 0`` are ``NaN``.

    >>> lo, hi = wilson_interval(8, 10)
    >>> round(float(lo), 4), round(float(hi), 4)
    (0.4902, 0.9433)
    >>> np.round(wilson_interval([0, 5], [0, 5], confidence=0.9)[0], 4).tolist()
    [nan, 0.6489]
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence: must be strictly between 0 and 1, got {confidence!r}")
    k = np.asarray(correct, dtype=float)
    n = np.asarray(total, dtype=float)
    if np.any(k < 0) or np.any(k > n):
        raise ValueError("correct/total: counts must satisfy 0 ≤ correct ≤ total")
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    evaluated = n > 0
    n_safe = np.where(evaluated, n, 1.0)
    p = k / n_safe
    z2n = z * z / n_safe
    denom = 1.0 + z2n
    centre = (p + z2n / 2.0) / denom
    half = z / denom * np.sqrt(p * (1.0 - p) / n_safe + z2n / (4.0 * n_safe))
    # lo ≤ p ≤ hi holds exactly; clamp so that rounding cannot break it (e.g. lo = 3e-17 at p = 0)
    lo = np.where(evaluated, np.clip(np.minimum(centre - half, p), 0.0, 1.0), np.nan)
    hi = np.where(evaluated, np.clip(np.maximum(centre + half, p), 0.0, 1.0), np.nan)
    return lo, hi


def task_accuracy_matrix(
    class_acc: np.ndarray,
    tasks: list[np.ndarray],
    *,
    correct: np.ndarray | None = None,
    total: np.ndarray | None = None,
    mode: TaskAccuracy = "macro",
) -> np.ndarray:
    """Task accuracy ``A_p(j)`` at every point (``P × K``), ``NaN`` where a class of task j was not evaluated.

    ``macro`` (default, Konaté et al. eq. 2): mean of the class accuracies of task j.
    ``micro``: pooled counts, ``Σ correct / Σ total`` over the classes of task j (needs counts).

    >>> acc = np.array([[1.0, 0.5, np.nan], [0.8, 0.4, 0.3]])
    >>> task_accuracy_matrix(acc, [np.array([0, 1]), np.array([2])]).round(4).tolist()
    [[0.75, nan], [0.6, 0.3]]
    >>> task_accuracy_matrix(acc, [np.array([0, 1]), np.array([2])], mode="micro",
    ...     correct=np.array([[9, 1, 0], [8, 4, 3]]),
    ...     total=np.array([[9, 2, 0], [10, 10, 10]])).round(4).tolist()
    [[0.9091, nan], [0.6, 0.3]]
    """
    order = np.concatenate(tasks)
    sizes = np.array([len(t) for t in tasks])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    if class_acc.shape[0] == 0:
        return np.zeros((0, len(tasks)))
    if mode == "micro" and (correct is None or total is None):
        raise ValueError("task_accuracy: 'micro' pools correct/total counts; this log has accuracies only")
    if mode not in ("macro", "micro"):
        raise ValueError(f"task_accuracy: must be 'macro' or 'micro', got {mode!r}")
    n_points = class_acc.shape[0]
    out = np.empty((n_points, len(tasks)))
    # blocks of rows, reordered into one reused buffer (no fresh pages per block); np.take reorders
    # columns ~4× faster than [:, order]
    reordered = np.empty((min(_ROWS, n_points), len(order))) if mode == "macro" else None
    for r0 in range(0, n_points, _ROWS):
        rows = slice(r0, r0 + _ROWS)
        if reordered is not None:
            block = reordered[: min(_ROWS, n_points - r0)]
            np.take(class_acc[rows], order, axis=1, out=block)
            out[rows] = np.add.reduceat(block, starts, axis=1) / sizes
            continue
        assert correct is not None and total is not None
        total_by_task = np.take(total[rows], order, axis=1)
        correct_by_task = np.take(correct[rows], order, axis=1)
        c = np.add.reduceat(correct_by_task, starts, axis=1, dtype=np.int64).astype(float)
        t = np.add.reduceat(total_by_task, starts, axis=1, dtype=np.int64).astype(float)
        missing = np.minimum.reduceat(total_by_task, starts, axis=1) == 0  # a class of the task not evaluated
        with np.errstate(invalid="ignore", divide="ignore"):
            out[rows] = np.where(missing, np.nan, c / np.where(t > 0, t, 1.0))
    return out


_ROWS = 4096


@dataclass(frozen=True, eq=False)
class LogArrays:
    """Tensors derived once from a validated log; every metric is a function of these.

    ``class_acc`` is ``P × C`` (``NaN`` = not evaluated), ``correct``/``total`` the counts (``None``
    when any point carries ``accuracy`` instead), ``task_acc`` the ``P × K`` task accuracy (macro or
    micro), ``R`` the ``K × K`` task-end task-accuracy matrix and ``r`` the ``K × C`` task-end class
    accuracies (rows of unfinished tasks are ``NaN``; ``R[i, j]`` for ``j > i`` only where future tasks
    were evaluated).

    >>> from clgate.schemas import EvaluationLog
    >>> log = EvaluationLog.parse({"tasks": [[0], [1, 2]], "points": [
    ...     {"iteration": 5, "task": 1, "task_end": True, "accuracy": [0.9, None, None]},
    ...     {"iteration": 9, "task": 2, "task_end": True, "accuracy": [0.5, 0.8, 0.6]}]})
    >>> a = LogArrays.from_log(log)
    >>> a.n_tasks, a.n_classes, a.finished_tasks, a.task_end_idx.tolist()
    (2, 3, 2, [0, 1])
    >>> a.R.round(4).tolist()
    [[0.9, nan], [0.5, 0.7]]
    """

    n_tasks: int
    n_classes: int
    finished_tasks: int
    tasks: list[np.ndarray]
    class_task: np.ndarray
    task_sizes: np.ndarray
    iterations: np.ndarray
    point_task: np.ndarray
    task_end_idx: np.ndarray
    task_start_idx: np.ndarray
    class_acc: np.ndarray
    correct: np.ndarray | None
    total: np.ndarray | None
    task_acc: np.ndarray
    R: np.ndarray
    r: np.ndarray
    task_accuracy: TaskAccuracy = "macro"
    class_names: list[str] = field(default_factory=list)
    """The name of every column: the class in an NC log, ``"<class> @ <group>"`` (a cell) in NI/NIC."""
    class_of: np.ndarray | None = None
    """NI/NIC logs: the class id of every column (cell); ``None`` in an NC log (the identity)."""
    new_classes: np.ndarray | None = None
    """Classes each task brings that no earlier task brought (``task_sizes`` in an NC log)."""
    scenario: str = "nc"
    column_class: list[str] | None = None
    """NI/NIC logs: the class name of every column (cell)."""
    column_group: list[str] | None = None
    """NI/NIC logs: the sample group of every column (cell): its task's group, or ``task k``."""
    resources: dict[str, np.ndarray] | None = None
    partial: bool = False
    meta: dict[str, Any] = field(default_factory=dict)
    header: EvaluationLog | None = None
    """The log without its points (set when read by :func:`clgate.logfile.read_log`)."""
    sha256: str | None = None
    """The log's hash when already known; :func:`clgate.policy.log_hash` computes it otherwise."""

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_log(cls, log: EvaluationLog | LogArrays, *, task_accuracy: TaskAccuracy = "macro") -> LogArrays:
        """The tensors of a validated :class:`~clgate.schemas.EvaluationLog` (one pass over the points);
        :class:`LogArrays` (a log already read into arrays) are returned with ``task_accuracy`` applied."""
        if task_accuracy not in ("macro", "micro"):
            raise ValueError(f"task_accuracy: must be 'macro' or 'micro', got {task_accuracy!r}")
        if isinstance(log, LogArrays):
            return log.with_task_accuracy(task_accuracy)
        points = log.points
        n_points, n_classes = len(points), log.n_classes
        with_counts = [p.correct is not None for p in points]
        columns: dict[str, Any] = {
            "iteration": np.fromiter((p.iteration for p in points), dtype=np.int64, count=n_points),
            "task": np.fromiter((p.task for p in points), dtype=np.int64, count=n_points),
            "task_end": np.fromiter((p.task_end for p in points), dtype=bool, count=n_points),
        }
        if all(with_counts):
            columns["correct"] = _matrix((p.correct for p in points), n_points, n_classes, np.int64)
            columns["total"] = _matrix((p.total for p in points), n_points, n_classes, np.int64)
        elif not any(with_counts):
            columns["class_acc"] = np.array([p.accuracy for p in points], dtype=float).reshape(
                n_points, n_classes
            )
        else:
            class_acc = np.full((n_points, n_classes), np.nan)
            for i, p in enumerate(points):  # mixed logs: the accuracy list is the input
                if p.correct is not None:
                    t = np.asarray(p.total, dtype=float)
                    class_acc[i] = np.divide(p.correct, t, out=np.full(n_classes, np.nan), where=t > 0)
                else:
                    class_acc[i] = np.array(p.accuracy, dtype=float)
            columns["class_acc"] = class_acc
        return cls.from_columns(log, task_accuracy=task_accuracy, **columns)

    @classmethod
    def from_columns(
        cls,
        log: EvaluationLog,
        *,
        iteration: np.ndarray,
        task: np.ndarray,
        task_end: np.ndarray,
        correct: np.ndarray | None = None,
        total: np.ndarray | None = None,
        class_acc: np.ndarray | None = None,
        task_accuracy: TaskAccuracy = "macro",
    ) -> LogArrays:
        """The tensors from per-point columns (``task`` 1-based) and either the ``P × C`` counts or
        the class accuracies; ``log`` gives the rest (its ``points`` are not read)."""
        n_classes, n_tasks = log.n_classes, log.n_tasks
        tasks = [np.asarray(t, dtype=np.int64) for t in log.tasks]
        class_task = np.empty(n_classes, dtype=np.int64)
        for k, t in enumerate(tasks):
            class_task[t] = k
        point_task = task - 1
        task_end_idx = np.flatnonzero(task_end)
        # first point of each task's own training (-1 for tasks never trained in this log)
        task_start_idx = np.full(n_tasks, -1, dtype=np.int64)
        if len(point_task):
            first = np.flatnonzero(np.r_[True, point_task[1:] != point_task[:-1]])
            task_start_idx[point_task[first]] = first
        if correct is not None and total is not None:
            # 0/0 is NaN ("not evaluated"): the contract allows no correct count where total is 0
            with np.errstate(invalid="ignore", divide="ignore"):
                class_acc = np.true_divide(correct, total, dtype=float)
            infinite = np.isinf(class_acc)  # correct > 0 = total: an invalid log, still "not evaluated"
            if infinite.any():
                class_acc[infinite] = np.nan
        assert class_acc is not None
        resources = None
        if log.resources is not None:
            resources = {
                name: np.array([getattr(r, name) for r in log.resources], dtype=float)
                for name in ("model_params", "buffer_bytes", "train_bytes", "ops_train", "ops_pass")
            }
        names = log.cell_names()
        class_of = None if log.class_of is None else np.asarray(log.class_of, dtype=np.int64)
        base = cls(
            n_tasks=n_tasks,
            n_classes=n_classes,
            finished_tasks=len(task_end_idx),
            tasks=tasks,
            class_task=class_task,
            task_sizes=np.array([len(t) for t in tasks], dtype=np.int64),
            iterations=iteration,
            point_task=point_task,
            task_end_idx=task_end_idx,
            task_start_idx=task_start_idx,
            class_acc=class_acc,
            correct=correct,
            total=total,
            task_acc=np.zeros((0, n_tasks)),
            R=np.zeros((0, 0)),
            r=np.zeros((0, 0)),
            class_names=names,
            class_of=class_of,
            new_classes=_new_classes(tasks, class_of),
            scenario=log.scenario,
            column_class=None if class_of is None else [log.class_label(int(c)) for c in class_of],
            column_group=None if class_of is None else [log.group_label(k) for k in log.task_of_cells()],
            resources=resources,
            partial=log.partial,
            meta=dict(log.meta),
        )
        return base.with_task_accuracy(task_accuracy)

    def with_task_accuracy(self, mode: TaskAccuracy) -> LogArrays:
        """The same log with ``task_acc`` and ``R`` recomputed as ``macro`` or ``micro``."""
        if mode == self.task_accuracy and self.R.shape == (self.n_tasks, self.n_tasks):
            return self
        task_acc = task_accuracy_matrix(
            self.class_acc, self.tasks, correct=self.correct, total=self.total, mode=mode
        )
        K, F = self.n_tasks, self.finished_tasks
        R = np.full((K, K), np.nan)
        r = np.full((K, self.n_classes), np.nan)
        R[:F] = task_acc[self.task_end_idx]
        r[:F] = self.class_acc[self.task_end_idx]
        return replace(self, task_acc=task_acc, R=R, r=r, task_accuracy=mode)

    # ------------------------------------------------------------------ derived, cheap
    @property
    def n_points(self) -> int:
        return len(self.iterations)

    @property
    def horizon(self) -> int:
        """Number of points the metrics read: up to and including the last finished task end."""
        return int(self.task_end_idx[-1]) + 1 if self.finished_tasks else 0

    @property
    def has_counts(self) -> bool:
        return self.correct is not None

    @property
    def diverged(self) -> Any:
        """The log's ``diverged`` record (``None`` when it did not diverge or the header is unknown)."""
        return self.header.diverged if self.header is not None else None

    @property
    def classes_seen(self) -> np.ndarray:
        """``C_k``: number of distinct classes in tasks 1 … k, for every k (length K) — in an NI/NIC log
        the classes, not the cells."""
        return np.cumsum(self.new_class_counts)

    @property
    def new_class_counts(self) -> np.ndarray:
        """Per task, the classes it brings that no earlier task brought (their cumulative sum is ``C_k``)."""
        return self.task_sizes if self.new_classes is None else self.new_classes

    @property
    def continual(self) -> bool:
        """Whether any evaluation point lies strictly between task ends (within the horizon)."""
        return self.horizon > self.finished_tasks

    def class_lcb(self, *, confidence: float = 0.95) -> np.ndarray | None:
        """Wilson lower bounds of every class accuracy (``P × C``), or ``None`` without counts."""
        if self.correct is None or self.total is None:
            return None
        return wilson_interval(self.correct, self.total, confidence=confidence)[0]


def _new_classes(tasks: list[np.ndarray], class_of: np.ndarray | None) -> np.ndarray:
    """Per task, how many of its classes no earlier task brought (an NC task: all of them).

    >>> _new_classes([np.array([0, 1]), np.array([2, 3])], np.array([0, 1, 0, 1])).tolist()
    [2, 0]
    """
    if class_of is None:
        return np.array([len(t) for t in tasks], dtype=np.int64)
    seen: set[int] = set()
    out = []
    for t in tasks:
        classes = set(class_of[t].tolist())
        out.append(len(classes - seen))
        seen |= classes
    return np.array(out, dtype=np.int64)


def _matrix(rows: Any, n_rows: int, n_cols: int, dtype: Any) -> np.ndarray:
    flat = np.fromiter(itertools.chain.from_iterable(rows), dtype=dtype, count=n_rows * n_cols)
    return flat.reshape(n_rows, n_cols)
