"""The metrics as pure, vectorised numpy functions.

Inputs are the tensors of :class:`~clgate.metrics.LogArrays`: ``R`` (``K × K`` task-end task accuracy,
``R[i, j]`` = task j at the end of task i), ``r`` (``K × C`` task-end class accuracy), ``task_acc``
(``P × K``) and ``class_acc`` (``P × C``). Everything is 0-based; the papers' task k is position k-1.
Per-task results are arrays of length K with ``NaN`` where the metric is undefined (k = 1 for
forgetting-like metrics, tasks not finished). No Python loop runs over points or classes; loops over
tasks (K) are allowed and used only where noted.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

INF = np.inf


def _lower(K: int, k: int = 0) -> np.ndarray:
    return np.tri(K, K, k, dtype=bool)


# ---------------------------------------------------------------------------------------------- accuracy
def average_accuracy(R: np.ndarray) -> np.ndarray:
    """``ACC_k = 1/k Σ_{j≤k} R[k][j]`` — Konaté et al. eq. 3, Michel et al. def. 3.1 (AA_k).

    >>> R = np.array([[0.9, np.nan], [0.6, 0.8]])
    >>> average_accuracy(R).round(4).tolist()
    [0.9, 0.7]
    """
    R = np.asarray(R, dtype=float)
    K = R.shape[0]
    return np.where(_lower(K), R, 0.0).sum(axis=1) / np.arange(1, K + 1)


def rescaled_average_accuracy(acc: np.ndarray, task_sizes: np.ndarray) -> np.ndarray:
    """``RAA_k = ACC_k · C_k / C_K`` — Michel et al. prop. 4.3 (``AA_k(Rand) = 1/C_k`` for any task sizes).

    ``task_sizes``: the classes each task brings that no earlier task brought, so that their cumulative
    sum is ``C_k``, the distinct classes seen (in an NI/NIC log: classes, not cells).

    >>> rescaled_average_accuracy(np.array([0.5, 0.25]), np.array([2, 2])).tolist()
    [0.25, 0.25]
    """
    seen = np.cumsum(task_sizes)
    return np.asarray(acc, dtype=float) * seen / seen[-1]


# --------------------------------------------------------------------------------------------- worst class
class ClassExtreme(NamedTuple):
    """Per task: the extreme value and the class that attains it (-1 where undefined)."""

    value: np.ndarray
    cls: np.ndarray


def minimal_class_accuracy(r: np.ndarray, class_task: np.ndarray, *, old_only: bool = False) -> ClassExtreme:
    """``MICA_k = min_{c ∈ tasks 1…k} r[k][c]`` — Konaté et al. eq. 5; ``old_only``: classes of tasks
    1…k-1 (§III-A).

    >>> r = np.array([[0.9, 0.7, np.nan], [0.4, 0.8, 0.6]])
    >>> minimal_class_accuracy(r, np.array([0, 0, 1])).value.tolist()
    [0.7, 0.4]
    >>> m = minimal_class_accuracy(r, np.array([0, 0, 1]), old_only=True)
    >>> m.value.tolist(), m.cls.tolist()
    ([nan, 0.4], [-1, 0])
    """
    r = np.asarray(r, dtype=float)
    K = r.shape[0]
    k = np.arange(K)[:, None]
    member = class_task[None, :] < k if old_only else class_task[None, :] <= k
    values = np.where(member, r, INF)
    values = np.where(np.isnan(values), INF, values)
    cls = np.argmin(values, axis=1)
    value = values[np.arange(K), cls]
    undefined = ~np.isfinite(value) | np.isnan(r[np.arange(K), cls])
    # a row with a NaN among its members is undefined (task not finished)
    undefined |= np.any(member & np.isnan(r), axis=1)
    return ClassExtreme(np.where(undefined, np.nan, value), np.where(undefined, -1, cls))


def wamica(mica: np.ndarray) -> float:
    """``WAMICA = w/K Σ_k MICA_k`` with ``w = 1 - (max_k MICA_k - min_k MICA_k)`` — Konaté et al. eqs. 6-7.

    >>> round(wamica(np.array([0.8, 0.6, 0.5])), 4)  # w = 0.7, mean 0.6333
    0.4433
    """
    mica = np.asarray(mica, dtype=float)
    w = 1.0 - (mica.max() - mica.min())
    return float(w * mica.mean())


# ---------------------------------------------------------------------------------------------- forgetting
def average_forgetting(R: np.ndarray) -> np.ndarray:
    """``AF_k = 1/(k-1) Σ_{j<k} (max_{l∈[j,k-1]} R[l][j] - R[k][j])`` — Michel et al. def. 3.2.

    >>> R = np.array([[0.5, np.nan, np.nan], [0.25, 0.25, np.nan], [1/6, 1/6, 1/6]])
    >>> average_forgetting(R).round(4).tolist()
    [nan, 0.25, 0.2083]
    """
    R = np.asarray(R, dtype=float)
    K = R.shape[0]
    out = np.full(K, np.nan)
    if K < 2:
        return out
    best = np.maximum.accumulate(np.where(_lower(K), R, -INF), axis=0)  # best[l, j] = max_{j≤l'≤l} R[l', j]
    drop = best[:-1] - R[1:]  # row k-1 ↔ task k: max_{l≤k-1} R[l][j] - R[k][j]
    out[1:] = np.where(_lower(K, 0)[: K - 1], drop, 0.0).sum(axis=1) / np.arange(1, K)
    return out


def random_forgetting(task_sizes: np.ndarray) -> np.ndarray:
    """``AF_k^rand = 1/(k-1) Σ_{j<k} (1/C_j - 1/C_k)``: a random classifier's AF (Michel et al. app. B).

    ``task_sizes`` as in :func:`rescaled_average_accuracy` (new classes per task). Tasks that bring no
    new class (NI) leave ``C_k`` unchanged; with no new class at all it is 0: chance forgets nothing.

    >>> random_forgetting(np.array([2, 2, 2])).round(4).tolist()
    [nan, 0.25, 0.2083]
    >>> random_forgetting(np.array([2, 0, 0])).tolist()
    [nan, 0.0, 0.0]
    """
    inv = 1.0 / np.cumsum(task_sizes)
    K = len(inv)
    out = np.full(K, np.nan)
    if K > 1:
        prefix = np.cumsum(inv)[:-1]  # Σ_{j<k} 1/C_j for k = 2 … K
        k = np.arange(1, K)
        out[1:] = prefix / k - inv[1:]
    return out


def rescaled_average_forgetting(af: np.ndarray, task_sizes: np.ndarray) -> np.ndarray:
    """``RAF_k = (AF_k / AF_k^rand) / max_{k'∈[2,K]} (1 / AF_k'^rand)`` — Michel et al. defs. 4.1-4.2.

    The normaliser is over all K tasks of the scenario (known from the task sizes alone). With equal
    task sizes this is ``β_k · AF_k`` (prop. 4.4), so ``RAF_K = AF_K``. Where ``AF_k^rand = 0`` (no new
    class up to task k: an NI scenario) the ratio is undefined (NaN), and the normaliser is taken over
    the tasks where it is defined.

    >>> rescaled_average_forgetting(np.array([np.nan, 0.25, 0.2083]), np.array([2, 2, 2])).round(4).tolist()
    [nan, 0.2083, 0.2083]
    >>> rescaled_average_forgetting(np.array([np.nan, 0.1, 0.2]), np.array([2, 0, 0])).tolist()
    [nan, nan, nan]
    """
    rand = random_forgetting(task_sizes)
    out = np.full(len(rand), np.nan)
    defined = rand[1:] > 1e-12  # exactly 0 up to rounding where no class is new
    if len(rand) > 1 and defined.any():
        scale = np.min(rand[1:][defined])
        with np.errstate(divide="ignore", invalid="ignore"):
            out[1:] = np.where(defined, np.asarray(af, dtype=float)[1:] / rand[1:] * scale, np.nan)
    return out


def forgetting(R: np.ndarray) -> np.ndarray:
    """``FORG_k = 1/(k-1) Σ_{i<k} (R[i][i] - R[k][i])`` — De Lange et al. §3.1 (Chaudhry et al. 2018).

    >>> forgetting(np.array([[0.9, np.nan], [0.6, 0.8]])).round(4).tolist()
    [nan, 0.3]
    """
    R = np.asarray(R, dtype=float)
    K = R.shape[0]
    out = np.full(K, np.nan)
    if K > 1:
        drop = np.diag(R)[None, :] - R
        out[1:] = np.where(_lower(K, -1), drop, 0.0).sum(axis=1)[1:] / np.arange(1, K)
    return out


def backward_transfer(R: np.ndarray) -> float:
    """``BWT = 1/(K-1) Σ_{j<K} (R[K][j] - R[j][j])`` (Lopez-Paz & Ranzato 2017); NaN for K = 1.

    >>> round(backward_transfer(np.array([[0.9, np.nan], [0.6, 0.8]])), 4)
    -0.3
    """
    R = np.asarray(R, dtype=float)
    K = R.shape[0]
    if K < 2:
        return float("nan")
    return float(np.mean(R[-1, :-1] - np.diag(R)[:-1]))


# ------------------------------------------------------------------------------------ Díaz-Rodríguez et al.
def lifetime_accuracy(R: np.ndarray) -> float:
    """``A = Σ_{i≥j} R[i][j] / (K(K+1)/2)`` — Díaz-Rodríguez et al. eq. 2.

    >>> round(lifetime_accuracy(np.array([[0.9, np.nan], [0.6, 0.8]])), 4)
    0.7667
    """
    R = np.asarray(R, dtype=float)
    K = R.shape[0]
    return float(R[_lower(K)].sum() / (K * (K + 1) / 2))


def lifetime_backward_transfer(R: np.ndarray) -> float:
    """``BWT = Σ_{i=2..K} Σ_{j<i} (R[i][j] - R[j][j]) / (K(K-1)/2)`` — Díaz-Rodríguez et al. eq. 3;
    NaN for K = 1.

    >>> round(lifetime_backward_transfer(np.array([[0.9, np.nan], [0.6, 0.8]])), 4)
    -0.3
    """
    R = np.asarray(R, dtype=float)
    K = R.shape[0]
    if K < 2:
        return float("nan")
    diff = R - np.diag(R)[None, :]
    return float(diff[_lower(K, -1)].sum() / (K * (K - 1) / 2))


def lifetime_forward_transfer(R: np.ndarray) -> float:
    """``FWT = Σ_{i<j} R[i][j] / (K(K-1)/2)`` — Díaz-Rodríguez et al. eq. 4; NaN when a future entry
    is missing or K = 1.

    >>> round(lifetime_forward_transfer(np.array([[0.9, 0.1], [0.6, 0.8]])), 4)
    0.1
    """
    R = np.asarray(R, dtype=float)
    K = R.shape[0]
    if K < 2:
        return float("nan")
    return float(R[~_lower(K)].sum() / (K * (K - 1) / 2))


def model_size_efficiency(model_params: np.ndarray) -> float:
    """``MS = min(1, 1/K Σ_i params_1 / params_i)`` — Díaz-Rodríguez et al. eq. 5.

    >>> model_size_efficiency(np.array([100.0, 200.0]))
    0.75
    """
    p = np.asarray(model_params, dtype=float)
    return float(min(1.0, np.mean(p[0] / p)))


def samples_storage_efficiency(buffer_bytes: np.ndarray, train_bytes: np.ndarray) -> float:
    """``SSS = 1 - min(1, 1/K Σ_i buffer_i / Σ_all train)`` — Díaz-Rodríguez et al. eq. 6; NaN if no
    training bytes.

    >>> samples_storage_efficiency(np.array([0.0, 50.0]), np.array([100.0, 100.0]))
    0.875
    """
    total = float(np.sum(train_bytes))
    if total <= 0:
        return float("nan")
    return float(1.0 - min(1.0, float(np.mean(np.asarray(buffer_bytes, dtype=float) / total))))


def computational_efficiency(ops_pass: np.ndarray, ops_train: np.ndarray, *, epsilon: float = 1.0) -> float:
    """``CE = min(1, 1/K Σ_i ops_pass_i · ε / ops_train_i)`` — Díaz-Rodríguez et al. eq. 7; NaN if a
    task spent 0 ops.

    >>> round(computational_efficiency(np.array([1.0, 1.0]), np.array([10.0, 5.0])), 4)
    0.15
    """
    ops_train = np.asarray(ops_train, dtype=float)
    if np.any(ops_train <= 0):
        return float("nan")
    return float(min(1.0, np.mean(np.asarray(ops_pass, dtype=float) * epsilon / ops_train)))


def cl_score(criteria: np.ndarray, weights: np.ndarray) -> float:
    """``CL_score = Σ_i w_i c_i`` — Díaz-Rodríguez et al. eq. 8 (criteria with weight 0 may be NaN).

    >>> round(cl_score(np.array([.3825, .6664, 0, .1, 1, 1, .4492]), np.full(7, 1 / 7)), 4)
    0.514
    """
    c = np.asarray(criteria, dtype=float)
    w = np.asarray(weights, dtype=float)
    used = w != 0
    return float(np.sum(w[used] * c[used]))


def cl_stability(criteria_runs: np.ndarray, weights: np.ndarray) -> float:
    """``CL_stability = 1 - Σ_i w_i stddev(c_i)`` over runs (rows) — Díaz-Rodríguez et al. eq. 9.

    ``stddev`` is the sample standard deviation (ddof = 1), as for "mean ± SD over seeds"; NaN for one run.

    >>> round(cl_stability(np.array([[0.5] * 7, [0.7] * 7]), np.full(7, 1 / 7)), 4)
    0.8586
    """
    c = np.asarray(criteria_runs, dtype=float)
    w = np.asarray(weights, dtype=float)
    if c.shape[0] < 2:
        return float("nan")
    used = w != 0
    return float(1.0 - np.sum(w[used] * np.std(c[:, used], axis=0, ddof=1)))


# ------------------------------------------------------------------------------- continual evaluation
class RunningMin(NamedTuple):
    """Running minimum of each column after its start row, and the earliest row attaining it."""

    value: np.ndarray  # +inf until the column has a defined value
    row: np.ndarray  # -1 until then


def running_min_after(values: np.ndarray, after: np.ndarray) -> RunningMin:
    """For each column j: ``min(values[after[j]+1 : p+1, j])`` at every row p, ignoring NaN.

    O(P × columns), one pass of ``np.minimum.accumulate``; the argmin row comes from forward-filling
    the rows where a new minimum appears (``np.maximum.accumulate`` of their indices).

    >>> m = running_min_after(np.array([[0.9], [0.5], [np.nan], [0.7], [0.2]]), np.array([0]))
    >>> m.value[:, 0].tolist(), m.row[:, 0].tolist()
    ([inf, 0.5, 0.5, 0.5, 0.2], [-1, 1, 1, 1, 4])
    """
    values = np.asarray(values, dtype=float)
    rows = np.arange(values.shape[0])[:, None]
    masked = np.where((rows > np.asarray(after)[None, :]) & ~np.isnan(values), values, INF)
    run = np.minimum.accumulate(masked, axis=0)
    previous = np.empty_like(run)
    previous[:1] = INF
    previous[1:] = run[:-1]
    new = masked < previous
    row = np.maximum.accumulate(np.where(new, rows, -1), axis=0)
    return RunningMin(run, row)


class ClassMinima(NamedTuple):
    """Lowest accuracy of each class after its own task end, at every finished task end."""

    value: np.ndarray  # F × C: [k, c] = min a_p(c) over e(task(c)) < p ≤ e(k); NaN if task(c) ≥ k
    segment: np.ndarray  # F × C: the task segment (e(s-1), e(s)] holding the earliest point of that minimum


def class_minima_after_learning(
    class_acc: np.ndarray, class_task: np.ndarray, task_end_idx: np.ndarray
) -> ClassMinima:
    """``min{a_p(c) : e(task(c)) < p ≤ e(k)}`` for every finished task k and every class c (NaN ignored).

    One ``np.fmin.reduce`` per task segment ``(e(k-1), e(k)]`` of the points
    (a class counts from the segment after its own task's end); the rest is F × C: a cumulative minimum
    over segments. The earliest segment attaining each minimum comes with it, so the exact point can
    be found inside one segment (:func:`first_point_of_minimum`).

    >>> acc = np.array([[0.9, np.nan], [0.2, 0.8], [0.5, 0.7], [0.4, 0.3]])  # task ends at points 0, 2, 3
    >>> m = class_minima_after_learning(acc, np.array([0, 1]), np.array([0, 2, 3]))
    >>> m.value.tolist(), m.segment[2].tolist()
    ([[nan, nan], [0.2, nan], [0.2, 0.3]], [1, 2])
    """
    ends = np.asarray(task_end_idx)
    F = len(ends)
    C = class_acc.shape[1]
    if F == 0:
        return ClassMinima(np.zeros((0, C)), np.zeros((0, C), dtype=np.int64))
    starts = np.r_[0, ends[:-1] + 1]
    with np.errstate(invalid="ignore"):  # NaN: not evaluated in the segment
        # one reduce per segment: the same minima as np.fmin.reduceat(axis=0), ~10× faster on P × C
        seg = np.stack(
            [np.fmin.reduce(class_acc[s : e + 1], axis=0) for s, e in zip(starts, ends, strict=True)]
        )
    learned = np.arange(F)[:, None] > np.asarray(class_task)[None, :]
    seg = np.where(learned, seg, np.nan)
    value = np.fmin.accumulate(seg, axis=0)
    rows = np.arange(F)[:, None]
    previous = np.vstack([np.full((1, C), np.nan), value[:-1]])
    new = ~np.isnan(seg) & (np.isnan(previous) | (seg < previous))
    segment = np.maximum.accumulate(np.where(new, rows, -1), axis=0)
    return ClassMinima(value, segment)


def first_point_of_minimum(
    class_acc: np.ndarray,
    task_end_idx: np.ndarray,
    segment: np.ndarray,
    classes: np.ndarray,
    minimum: np.ndarray,
) -> np.ndarray:
    """For each class ``classes[i]``: the first point of task segment ``segment[i]`` where its accuracy
    equals ``minimum[i]`` (-1 where ``segment[i]`` is -1). Loops over segments (tasks), not classes.

    >>> acc = np.array([[0.9, np.nan], [0.2, 0.8], [0.5, 0.7], [0.4, 0.3]])
    >>> first_point_of_minimum(
    ...     acc, np.array([0, 2, 3]), np.array([1, 2]), np.array([0, 1]), np.array([0.2, 0.3]))
    array([1, 3])
    """
    ends = np.asarray(task_end_idx)
    starts = np.r_[0, ends[:-1] + 1]
    out = np.full(len(classes), -1, dtype=np.int64)
    for s in np.unique(segment[segment >= 0]):
        which = np.flatnonzero(segment == s)
        block = class_acc[starts[s] : ends[s] + 1][:, classes[which]]
        out[which] = starts[s] + np.argmax(block == minimum[which][None, :], axis=0)
    return out


def min_accuracy(
    task_acc: np.ndarray, task_end_idx: np.ndarray, n_tasks: int
) -> tuple[np.ndarray, RunningMin]:
    """``min-ACC_k = 1/(k-1) Σ_{i<k} min{A_p(i) : e(i) < p ≤ e(k)}`` — De Lange et al. eq. 2.

    Returns the per-task values (length K) and the running minima (for evidence).

    >>> A = np.array([[0.9, np.nan], [0.4, 0.3], [0.6, 0.8]])  # task ends at points 0 and 2
    >>> min_accuracy(A, np.array([0, 2]), 2)[0].tolist()
    [nan, 0.4]
    """
    F = len(task_end_idx)
    out = np.full(n_tasks, np.nan)
    if F == 0:
        return out, RunningMin(np.zeros((0, 0)), np.zeros((0, 0), dtype=np.int64))
    H = int(task_end_idx[-1]) + 1
    run = running_min_after(task_acc[:H, :F], task_end_idx)
    at_end = run.value[task_end_idx]  # F × F: [k, i] = min over (e(i), e(k)]
    if F > 1:
        out[1:F] = np.where(_lower(F, -1), at_end, 0.0).sum(axis=1)[1:] / np.arange(1, F)
    return out, run


def worst_case_accuracy_curve(
    task_acc: np.ndarray, point_task: np.ndarray, task_end_idx: np.ndarray
) -> np.ndarray:
    """``WC-ACC_t = 1/k A_t(k) + (1 - 1/k) min-ACC_k(t)`` at every point t of task k — De Lange et al. eq. 6.

    ``min-ACC_k(t)`` uses the points up to t. At k = 1 it is ``A_t(1)``. NaN where a needed accuracy is
    undefined (a task not evaluated at t, or an old task not evaluated since its end). De Lange et al.
    eq. 7: at a task end it never exceeds ``ACC_k``.

    >>> A = np.array([[0.9, np.nan], [0.4, 0.3], [0.6, 0.8]])
    >>> worst_case_accuracy_curve(A, np.array([0, 1, 1]), np.array([0, 2])).round(4).tolist()
    [0.9, 0.35, 0.6]
    """
    P, K = task_acc.shape
    ends = np.full(K, P, dtype=np.int64)  # tasks without an end in the log: never "old"
    ends[: len(task_end_idx)] = task_end_idx
    run = running_min_after(task_acc, ends).value
    k = np.asarray(point_task)
    old = np.arange(K)[None, :] < k[:, None]
    with np.errstate(invalid="ignore"):
        old_sum = np.where(old, run, 0.0).sum(axis=1)
        current = task_acc[np.arange(P), k]
        out = (current + old_sum) / (k + 1)
    return np.where(np.isfinite(out), out, np.nan)


class Windowed(NamedTuple):
    """Per task i: the largest drop (``forgetting``) and rise (``plasticity``) within a window, ≥ 0,
    and the points ``(from, to)`` of the pair that attains it (-1 when the value is 0 by default)."""

    forgetting: np.ndarray
    forgetting_from: np.ndarray
    forgetting_to: np.ndarray
    plasticity: np.ndarray
    plasticity_from: np.ndarray
    plasticity_to: np.ndarray


def _previous_window_max(y: np.ndarray, real: np.ndarray, length: int) -> np.ndarray:
    """``max(y[:, j-length : j])`` for every ``j`` in ``real`` (each ``j ≥ length``), by doubling.

    After t doubling steps ``S[:, a] = max(y[:, a : a + 2^t])``; a window of ``length`` is covered by
    the two blocks of size ``2^t ≤ length`` that start at ``j - length`` and end at ``j - 1``.
    O(n log length).
    """
    S = y
    step = 1
    while step * 2 <= length:
        S = np.maximum(S[:, :-step], S[:, step:])
        step *= 2
    return np.maximum(S[:, real - length], S[:, real - step])


def windowed_extremes(
    task_acc: np.ndarray, task_start_idx: np.ndarray, horizon: int, n_seen: int, window: int
) -> Windowed:
    """Windowed forgetting and plasticity of each task — De Lange et al. eqs. 3-5 and 10.

    For task i the sequence is its accuracy from the first point of its own training up to
    ``horizon`` (points where task i was not evaluated are skipped: the window counts evaluations of
    task i). ``WF_i = max(0, max_{m<m', m'-m<w} A_m - A_m')`` and ``WP_i`` the same with ``A_m' - A_m``:
    every pair that fits in some window of w consecutive points, which is what ``max_n Δ_n`` over all
    windows n ≤ t (eq. 4) ranges over. Computed as ``max_{m'} (max of the w-1 points before m') - A_m'``
    with a doubling range-maximum: O(P · K · log w), exact.

    >>> A = np.array([[0.5], [0.2], [0.9], [0.4]])
    >>> w = windowed_extremes(A, np.array([0]), 4, 1, 3)
    >>> w.forgetting.tolist(), w.plasticity.round(4).tolist()
    ([0.5], [0.7])
    >>> w.plasticity_from.tolist(), w.plasticity_to.tolist()
    ([1], [2])
    """
    if window < 2:
        raise ValueError(f"windows: must be ≥ 2, got {window}")
    L = window - 1
    zeros = np.zeros(n_seen)
    none = np.full(n_seen, -1, dtype=np.int64)
    if n_seen == 0:
        return Windowed(zeros, none, none, zeros, none, none)
    points_of: list[np.ndarray] = []
    for i in range(n_seen):  # loop over tasks only
        start = int(task_start_idx[i])
        col = task_acc[start:horizon, i]
        points_of.append(np.flatnonzero(~np.isnan(col)) + start)
    lengths = np.array([len(p) for p in points_of])
    pts = np.concatenate(points_of)
    cols = np.repeat(np.arange(n_seen), lengths)
    x = task_acc[pts, cols]
    # padded layout: L slots of -inf before each task's sequence so no window crosses tasks
    seg_start_padded = np.cumsum(lengths + L) - lengths
    real = (
        np.concatenate([np.arange(n) + s for n, s in zip(lengths, seg_start_padded, strict=True)])
        if len(pts)
        else pts
    )
    y = np.full((2, int(np.sum(lengths + L))), -INF)
    y[0, real] = x
    y[1, real] = -x
    prev = _previous_window_max(y, real, L)
    with np.errstate(invalid="ignore"):
        drop = prev[0] - x  # max of the window before m' minus A_m'
        rise = x + prev[1]  # A_m' minus min of the window before m'
    seg_start = np.cumsum(lengths) - lengths
    out = []
    for gains in (drop, rise):
        value = np.zeros(n_seen)
        first = np.full(n_seen, -1, dtype=np.int64)
        second = np.full(n_seen, -1, dtype=np.int64)
        for i in range(n_seen):  # loop over tasks: argmax inside the task's own segment
            s, n = int(seg_start[i]), int(lengths[i])
            if n < 2:
                continue
            j = s + int(np.argmax(gains[s : s + n]))
            if gains[j] <= 0:
                continue
            value[i] = gains[j]
            lo = max(s, j - L)
            window_vals = x[lo:j]
            m = lo + int(np.argmax(window_vals) if gains is drop else np.argmin(window_vals))
            first[i], second[i] = pts[m], pts[j]
        out += [value, first, second]
    return Windowed(*out)


def class_regression(baseline_final: np.ndarray, candidate_final: np.ndarray) -> tuple[float, int]:
    """Largest drop of a class's final accuracy, ``max_c (baseline_c - candidate_c)``, and that class.

    Negative when every class improved. clgate extension.

    >>> class_regression(np.array([0.9, 0.8]), np.array([0.7, 0.85]))
    (0.2..., 0)
    """
    drop = np.asarray(baseline_final, dtype=float) - np.asarray(candidate_final, dtype=float)
    c = int(np.nanargmax(drop))
    return float(drop[c]), c
