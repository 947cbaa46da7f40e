"""Helpers for the metrics tests: a random-log generator and a deliberately naive reference.

The reference (:func:`reference_metrics`) is written straight from the equations of
``docs/metrics.md`` with plain Python loops over the raw JSON dict — no numpy, nothing shared
with ``clgate.metrics`` — so that agreement between the two means something. It is slow on purpose.
Both are handed to tests as session fixtures (``--import-mode=importlib`` cannot import conftest).
"""

from __future__ import annotations

import math
import random
import statistics
from typing import Any

import pytest

CRITERIA = ["a_lifetime", "rem", "bwt_plus", "fwt_lifetime", "ms", "sss", "ce"]


# ---------------------------------------------------------------------------------------------- generator
def random_log(
    seed: int,
    *,
    n_tasks: int | None = None,
    sizes: list[int] | None = None,
    max_between: int = 4,
    only_ends: bool = False,
    future: bool = False,
    counts: bool = True,
    partial: bool = False,
    subsample: float = 0.0,
    resources: bool = True,
    coarse: bool = False,
    tasks: list[list[int]] | None = None,
) -> dict[str, Any]:
    """A valid ``clgate.evaluation-log/v1`` document with random content.

    ``sizes`` (or random sizes 1-4) fixes the task split; class ids are shuffled over tasks.
    ``max_between`` points at most between task ends (0 with ``only_ends``); ``future`` evaluates every
    class at task ends (and often between); ``counts`` False gives ``accuracy`` lists; ``partial``
    stops after a random number of finished tasks, maybe inside the next task; ``subsample`` is the
    probability that a seen class is skipped at an intermediate point; ``coarse`` draws accuracies
    from a few values (ties).
    """
    rng = random.Random(seed)
    given_tasks = tasks
    if given_tasks is not None:
        sizes = [len(t) for t in given_tasks]
    if sizes is None:
        sizes = [rng.randint(1, 4) for _ in range(n_tasks or rng.randint(1, 5))]
    K, C = len(sizes), sum(sizes)
    ids = list(range(C))
    rng.shuffle(ids)
    tasks, at = [], 0
    for s in sizes:
        tasks.append(sorted(ids[at : at + s]) if rng.random() < 0.5 else ids[at : at + s])
        at += s
    if given_tasks is not None:
        tasks = [list(t) for t in given_tasks]
    finished = K
    trailing = 0
    if partial:
        finished = rng.randint(0, K - 1)
        trailing = rng.randint(0, 3)

    def value(c: int, total: int) -> tuple[int, int]:
        if coarse:
            return rng.choice([0, total // 2, total]), total
        return rng.randint(0, total), total

    points: list[dict[str, Any]] = []
    iteration = rng.choice([0, 1, 5])

    def add_point(task: int, end: bool) -> None:
        nonlocal iteration
        seen = {c for k in range(task) for c in tasks[k]}
        evaluated = set()
        for c in range(C):
            if c in seen:
                if end or rng.random() >= subsample:
                    evaluated.add(c)
            elif future and (end or rng.random() < 0.7):
                evaluated.add(c)
        point: dict[str, Any] = {"iteration": iteration, "task": task, "task_end": end}
        if counts:
            correct, total = [], []
            for c in range(C):
                if c in evaluated:
                    k, n = value(c, rng.randint(1, 12))
                else:
                    k, n = 0, 0
                correct.append(k)
                total.append(n)
            point["correct"], point["total"] = correct, total
        else:
            acc = []
            for c in range(C):
                if c in evaluated:
                    acc.append(rng.choice([0.0, 0.5, 1.0]) if coarse else round(rng.random(), 6))
                else:
                    acc.append(None)
            point["accuracy"] = acc
        points.append(point)
        iteration += rng.randint(1, 7)

    for k in range(1, finished + 1):
        between = 0 if only_ends else rng.randint(0, max_between)
        for _ in range(between):
            add_point(k, False)
        add_point(k, True)
    if partial and finished < K:
        for _ in range(trailing):
            add_point(finished + 1, False)
    doc: dict[str, Any] = {
        "format": "clgate.evaluation-log/v1",
        "tasks": tasks,
        "points": points,
        "meta": {"seed": seed},
    }
    if rng.random() < 0.5 and given_tasks is None:
        doc["class_names"] = [f"c{c}" for c in range(C)]
    if partial:
        doc["partial"] = True
    if resources:
        n_res = K if not partial else finished
        params = rng.randint(1000, 5000)
        res = []
        for k in range(n_res):
            params += rng.choice([0, 0, rng.randint(1, 3000)])
            res.append(
                {
                    "task": k + 1,
                    "model_params": params,
                    "buffer_bytes": rng.randint(0, 4000),
                    "train_bytes": rng.randint(1000, 5000),
                    "ops_train": float(rng.randint(10, 1000)),
                    "ops_pass": float(rng.randint(1, 20)),
                }
            )
        doc["resources"] = res
    return doc


# ---------------------------------------------------------------------------------------------- reference
def reference_metrics(
    doc: dict[str, Any],
    *,
    task_accuracy: str = "macro",
    windows: tuple[int, ...] = (10, 100),
    weights: list[float] | None = None,
    epsilon: float = 1.0,
    confidence: float = 0.95,
    baseline: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Every metric id, naively, from the raw log dict. Per-task: list of K (None where undefined)."""
    tasks = doc["tasks"]
    K = len(tasks)
    C = sum(len(t) for t in tasks)
    pts = doc["points"]
    task_of = {c: k for k, t in enumerate(tasks) for c in t}
    weights = weights or [1 / 7] * 7

    def a(p: dict, c: int) -> float | None:
        if p.get("correct") is not None:
            return p["correct"][c] / p["total"][c] if p["total"][c] > 0 else None
        return p["accuracy"][c]

    def A(p: dict, j: int) -> float | None:
        if any(a(p, c) is None for c in tasks[j]):
            return None
        if task_accuracy == "micro":
            return sum(p["correct"][c] for c in tasks[j]) / sum(p["total"][c] for c in tasks[j])
        return sum(a(p, c) for c in tasks[j]) / len(tasks[j])

    ends = [i for i, p in enumerate(pts) if p.get("task_end")]
    F = len(ends)
    R = [[A(pts[ends[i]], j) for j in range(K)] for i in range(F)]
    r = [[a(pts[ends[i]], c) for c in range(C)] for i in range(F)]
    sizes = [len(t) for t in tasks]
    Ck = [sum(sizes[: k + 1]) for k in range(K)]
    m: dict[str, Any] = {}

    def per_task(f, start: int = 0) -> list:
        return [f(k) if start <= k < F else None for k in range(K)]

    m["acc"] = per_task(lambda k: sum(R[k][j] for j in range(k + 1)) / (k + 1))
    m["mica"] = per_task(lambda k: min(r[k][c] for c in range(C) if task_of[c] <= k))
    m["mica_old"] = per_task(lambda k: min(r[k][c] for c in range(C) if task_of[c] < k), 1)
    m["wamica"] = None
    if F:
        micas = m["mica"][:F]
        m["wamica"] = (1 - (max(micas) - min(micas))) / F * sum(micas)

    def af(k: int) -> float:
        return sum(max(R[i][j] for i in range(j, k)) - R[k][j] for j in range(k)) / k

    m["af"] = per_task(af, 1)
    m["raa"] = [None if v is None else v * Ck[k] / Ck[-1] for k, v in enumerate(m["acc"])]

    def af_rand(k: int) -> float:  # 0-based k ≥ 1
        return sum(1 / Ck[j] - 1 / Ck[k] for j in range(k)) / k

    if K > 1:
        norm = max(1 / af_rand(k) for k in range(1, K))
        m["raf"] = [None if v is None else v / af_rand(k) / norm for k, v in enumerate(m["af"])]
    else:
        m["raf"] = [None]
    m["bwt"] = sum(R[F - 1][j] - R[j][j] for j in range(F - 1)) / (F - 1) if F >= 2 else None
    m["a_lifetime"] = sum(R[i][j] for i in range(F) for j in range(i + 1)) / (F * (F + 1) / 2) if F else None
    bl = sum(R[i][j] - R[j][j] for i in range(1, F) for j in range(i)) / (F * (F - 1) / 2) if F >= 2 else None
    m["bwt_lifetime"] = bl
    m["rem"] = None if bl is None else 1 - abs(min(bl, 0))
    m["bwt_plus"] = None if bl is None else max(bl, 0)
    upper = [R[i][j] for i in range(F) for j in range(i + 1, F)]
    m["fwt_lifetime"] = sum(upper) / (F * (F - 1) / 2) if F >= 2 and None not in upper else None
    res = doc.get("resources")
    if res and F:
        res = res[:F]
        m["ms"] = min(1, sum(res[0]["model_params"] / x["model_params"] for x in res) / F)
        all_train = sum(x["train_bytes"] for x in res)
        m["sss"] = 1 - min(1, sum(x["buffer_bytes"] / all_train for x in res) / F) if all_train else None
        ok = all(x["ops_train"] > 0 for x in res)
        m["ce"] = min(1, sum(x["ops_pass"] * epsilon / x["ops_train"] for x in res) / F) if ok else None
    else:
        m["ms"] = m["sss"] = m["ce"] = None
    crit = [m[c] for c in CRITERIA]
    if all(v is not None or w == 0 for v, w in zip(crit, weights, strict=True)):
        m["cl_score"] = sum(w * v for v, w in zip(crit, weights, strict=True) if w != 0)
    else:
        m["cl_score"] = None
    m["cl_stability"] = None
    m["forg"] = per_task(lambda k: sum(R[i][i] - R[k][i] for i in range(k)) / k, 1)

    def low(j_values: list[float | None]) -> float | None:
        vals = [v for v in j_values if v is not None]
        return min(vals) if vals else None

    def min_after(i: int, upto: int) -> float | None:  # task i, points e(i) < p ≤ upto
        return low([A(pts[p], i) for p in range(ends[i] + 1, upto + 1)])

    m["min_acc"] = per_task(lambda k: sum(min_after(i, ends[k]) for i in range(k)) / k, 1)
    if F:
        p = ends[F - 1]
        if F == 1:
            m["wc_acc"] = A(pts[p], 0)
        else:
            m["wc_acc"] = A(pts[p], F - 1) / F + (1 - 1 / F) * m["min_acc"][F - 1]
    else:
        m["wc_acc"] = None

    def min_class(k: int) -> float:
        vals = []
        for c in range(C):
            if task_of[c] < k:
                v = low([a(pts[p], c) for p in range(ends[task_of[c]] + 1, ends[k] + 1)])
                if v is not None:
                    vals.append(v)
        return min(vals)

    m["min_class_acc"] = per_task(min_class, 1)
    H = ends[-1] + 1 if F else 0
    for w in windows:
        wf, wp = [], []
        for i in range(F):
            start = next(p for p in range(len(pts)) if pts[p]["task"] == i + 1)
            seq = [A(pts[p], i) for p in range(start, H)]
            seq = [v for v in seq if v is not None]
            best_drop = best_rise = 0.0
            for n in range(len(seq)):
                win = seq[max(0, n - w + 1) : n + 1]
                for x in range(len(win)):
                    for y in range(x + 1, len(win)):
                        best_drop = max(best_drop, win[x] - win[y])
                        best_rise = max(best_rise, win[y] - win[x])
            wf.append(best_drop)
            wp.append(best_rise)
        m[f"wf{w}"] = sum(wf) / F if F else None
        m[f"wp{w}"] = sum(wp) / F if F else None
    if all(p.get("correct") is not None for p in pts):
        z = statistics.NormalDist().inv_cdf(1 - (1 - confidence) / 2)

        def lower(k_: int, n: int) -> float:
            phat = k_ / n
            centre = phat + z * z / (2 * n)
            spread = z * math.sqrt(phat * (1 - phat) / n + z * z / (4 * n * n))
            return max(0.0, (centre - spread) / (1 + z * z / n))

        m["mica_lcb"] = per_task(
            lambda k: min(
                lower(pts[ends[k]]["correct"][c], pts[ends[k]]["total"][c])
                for c in range(C)
                if task_of[c] <= k
            )
        )
    else:
        m["mica_lcb"] = [None] * K
    m["class_regression"] = None
    if baseline is not None and F == K:
        b_ends = [i for i, p in enumerate(baseline["points"]) if p.get("task_end")]
        if len(b_ends) == len(baseline["tasks"]):
            bp, cp = baseline["points"][b_ends[-1]], pts[ends[-1]]
            m["class_regression"] = max(a(bp, c) - a(cp, c) for c in range(C))
    return m


def reference_class_stats(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Final accuracy and lowest accuracy after learning, per class, naively."""
    tasks, pts = doc["tasks"], doc["points"]
    C = sum(len(t) for t in tasks)
    task_of = {c: k for k, t in enumerate(tasks) for c in t}
    ends = [i for i, p in enumerate(pts) if p.get("task_end")]
    F = len(ends)

    def a(p: dict, c: int) -> float | None:
        if p.get("correct") is not None:
            return p["correct"][c] / p["total"][c] if p["total"][c] > 0 else None
        return p["accuracy"][c]

    out = []
    for c in range(C):
        learned = task_of[c] < F
        final = a(pts[ends[-1]], c) if learned else None
        low, at = None, None
        if learned:
            for p in range(ends[task_of[c]] + 1, ends[-1] + 1):
                v = a(pts[p], c)
                if v is not None and (low is None or v < low):
                    low, at = v, pts[p]["iteration"]
        out.append({"final_accuracy": final, "min_after_learned": low, "min_after_learned_iteration": at})
    return out


def reference_cl_stability(criteria_runs: list[list[float]], weights: list[float] | None = None) -> float:
    weights = weights or [1 / 7] * 7
    return 1 - sum(w * statistics.stdev([run[i] for run in criteria_runs]) for i, w in enumerate(weights))


@pytest.fixture(scope="session")
def make_log():
    return random_log


@pytest.fixture(scope="session")
def reference():
    return reference_metrics


@pytest.fixture(scope="session")
def reference_classes():
    return reference_class_stats


@pytest.fixture(scope="session")
def reference_stability():
    return reference_cl_stability


def assert_same(actual: Any, expected: Any, what: str, tol: float = 1e-9) -> None:
    if isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), f"{what}: {actual} != {expected}"
        for k, (x, y) in enumerate(zip(actual, expected, strict=True)):
            assert_same(x, y, f"{what}[{k}]", tol)
        return
    if expected is None:
        assert actual is None, f"{what}: library {actual}, reference null"
    else:
        assert actual is not None, f"{what}: library null, reference {expected}"
        assert math.isclose(actual, expected, rel_tol=tol, abs_tol=tol), (
            f"{what}: library {actual}, reference {expected}"
        )


@pytest.fixture(scope="session")
def same():
    return assert_same
