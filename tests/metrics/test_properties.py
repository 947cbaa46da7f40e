"""Invariants of the metrics (hypothesis): bounds, permutations, orderings, streaming = batch."""

from __future__ import annotations

import copy
import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clgate.metrics import LogArrays, compute_metrics, metric_info, worst_case_accuracy_curve
from clgate.schemas import EvaluationLog

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
WINDOWS = (2, 5)


@st.composite
def log_docs(draw, *, equal_sizes: bool = False, counts: bool | None = None) -> dict:
    """A valid log: 1-4 tasks, 0-5 points between task ends, counts or accuracies, maybe future tasks."""
    K = draw(st.integers(1, 4))
    if equal_sizes:
        sizes = [draw(st.integers(1, 3))] * K
    else:
        sizes = draw(st.lists(st.integers(1, 3), min_size=K, max_size=K))
    C = sum(sizes)
    order = draw(st.permutations(range(C)))
    tasks, at = [], 0
    for s in sizes:
        tasks.append(list(order[at : at + s]))
        at += s
    with_counts = draw(st.booleans()) if counts is None else counts
    future = draw(st.booleans())
    points, iteration = [], 0
    for k in range(1, K + 1):
        seen = {c for t in tasks[:k] for c in t}
        for q in range(draw(st.integers(0, 5)) + 1):
            end = (q > 0 and draw(st.booleans())) or q == 5
            evaluated = [c in seen or (future and end) or (future and draw(st.booleans())) for c in range(C)]
            if not end:
                evaluated = [e and draw(st.integers(0, 4)) > 0 for e in evaluated]
            point = {"iteration": iteration, "task": k, "task_end": end}
            if with_counts:
                total = [draw(st.integers(1, 9)) if e else 0 for e in evaluated]
                point["correct"] = [draw(st.integers(0, n)) for n in total]
                point["total"] = total
            else:
                point["accuracy"] = [draw(st.floats(0, 1)) if e else None for e in evaluated]
            points.append(point)
            iteration += draw(st.integers(1, 3))
            if end:
                break
        if not points[-1]["task_end"]:
            points[-1]["task_end"] = True
            last = points[-1]
            for c in seen | ({c for c in range(C)} if future else set()):
                if with_counts and last["total"][c] == 0:
                    last["total"][c], last["correct"][c] = 1, 0
                if not with_counts and last["accuracy"][c] is None:
                    last["accuracy"][c] = 0.5
    return {"tasks": tasks, "points": points}


def _values(value):
    return value if isinstance(value, list) else [value]


@SETTINGS
@given(doc=log_docs(), micro=st.booleans())
def test_every_metric_stays_in_its_registered_range(doc, micro):
    log = EvaluationLog.parse(doc)
    mode = "micro" if micro and log.points[0].correct is not None else "macro"
    result = compute_metrics(log, task_accuracy=mode, windows=WINDOWS)
    for metric_id, value in result.metrics.items():
        lo, hi = metric_info(metric_id).range
        for v in _values(value):
            assert v is None or lo - 1e-12 <= v <= hi + 1e-12, (metric_id, v)


@SETTINGS
@given(doc=log_docs(), data=st.data())
def test_permuting_classes_inside_a_task_changes_nothing(doc, data):
    C = sum(len(t) for t in doc["tasks"])
    perm = list(range(C))  # perm[old id] = new id, only within each task
    for t in doc["tasks"]:
        shuffled = data.draw(st.permutations(t))
        for old, new in zip(t, shuffled, strict=True):
            perm[old] = new
    moved = copy.deepcopy(doc)
    moved["tasks"] = [data.draw(st.permutations([perm[c] for c in t])) for t in doc["tasks"]]
    for p_old, p_new in zip(doc["points"], moved["points"], strict=True):
        for key in ("correct", "total", "accuracy"):
            if key in p_old:
                p_new[key] = [None] * C
                for c in range(C):
                    p_new[key][perm[c]] = p_old[key][c]
    a = compute_metrics(EvaluationLog.parse(doc), windows=WINDOWS).metrics
    b = compute_metrics(EvaluationLog.parse(moved), windows=WINDOWS).metrics
    for metric_id in a:
        for x, y in zip(_values(a[metric_id]), _values(b[metric_id]), strict=True):
            assert (x is None) == (y is None), metric_id
            assert x is None or math.isclose(x, y, abs_tol=1e-12), (metric_id, x, y)


@SETTINGS
@given(doc=log_docs(), micro=st.booleans())
def test_mica_never_exceeds_acc(doc, micro):
    log = EvaluationLog.parse(doc)
    mode = "micro" if micro and log.points[0].correct is not None else "macro"
    m = compute_metrics(log, task_accuracy=mode, windows=WINDOWS).metrics
    for mica, acc in zip(m["mica"], m["acc"], strict=True):
        assert mica <= acc + 1e-12
    for old, mica in zip(m["mica_old"][1:], m["mica"][1:], strict=True):
        assert old >= mica - 1e-12  # fewer classes, higher minimum


@SETTINGS
@given(doc=log_docs(equal_sizes=True))
def test_raa_and_raf_equal_acc_and_af_at_the_last_task(doc):
    """Michel et al. §4.1; RAF_K = AF_K needs equal task sizes (prop. 4.4), RAA_K = ACC_K always."""
    m = compute_metrics(EvaluationLog.parse(doc), windows=WINDOWS).metrics
    assert math.isclose(m["raa"][-1], m["acc"][-1], abs_tol=1e-12)
    if len(doc["tasks"]) > 1:
        assert math.isclose(m["raf"][-1], m["af"][-1], abs_tol=1e-12)


@SETTINGS
@given(doc=log_docs())
def test_raa_equals_acc_at_the_last_task_for_any_sizes(doc):
    m = compute_metrics(EvaluationLog.parse(doc), windows=WINDOWS).metrics
    assert math.isclose(m["raa"][-1], m["acc"][-1], abs_tol=1e-12)


@SETTINGS
@given(doc=log_docs(), micro=st.booleans())
def test_wc_acc_at_a_task_end_never_exceeds_acc_there(doc, micro):
    """De Lange et al. eq. 7: WC-ACC at the end of task k ≤ ACC_k (min over a range that holds e(k))."""
    log = EvaluationLog.parse(doc)
    mode = "micro" if micro and log.points[0].correct is not None else "macro"
    a = LogArrays.from_log(log, task_accuracy=mode)
    m = compute_metrics(a, task_accuracy=mode, windows=WINDOWS).metrics
    curve = worst_case_accuracy_curve(a.task_acc, a.point_task, a.task_end_idx)
    for k, p in enumerate(a.task_end_idx):
        assert curve[p] <= m["acc"][k] + 1e-12
    assert m["wc_acc"] == curve[a.task_end_idx[-1]]


@SETTINGS
@given(
    values=st.lists(st.floats(0, 1), min_size=1, max_size=30),
    decreasing=st.booleans(),
)
def test_windowed_metrics_with_w2_on_a_monotone_sequence(values, decreasing):
    """One task, one class: w = 2 sees consecutive pairs only; a monotone curve moves one way."""
    seq = sorted(values, reverse=decreasing)
    points = [
        {"iteration": i, "task": 1, "task_end": i == len(seq) - 1, "accuracy": [v]} for i, v in enumerate(seq)
    ]
    m = compute_metrics(
        EvaluationLog.parse({"tasks": [[0]], "points": points}), windows=(2, len(seq) + 1)
    ).metrics
    steps = np.diff(seq) if len(seq) > 1 else np.zeros(1)
    big = len(seq) + 1
    if decreasing:
        assert m["wp2"] == 0.0 and m[f"wp{big}"] == 0.0
        assert math.isclose(m["wf2"], float(np.max(-steps, initial=0.0)), abs_tol=1e-12)
        assert math.isclose(m[f"wf{big}"], seq[0] - seq[-1], abs_tol=1e-12)
    else:
        assert m["wf2"] == 0.0 and m[f"wf{big}"] == 0.0
        assert math.isclose(m["wp2"], float(np.max(steps, initial=0.0)), abs_tol=1e-12)
        assert math.isclose(m[f"wp{big}"], seq[-1] - seq[0], abs_tol=1e-12)


@SETTINGS
@given(doc=log_docs(), w=st.integers(2, 6))
def test_windowed_metrics_grow_with_the_window(doc, w):
    m = compute_metrics(EvaluationLog.parse(doc), windows=(w, w + 1)).metrics
    assert m[f"wf{w}"] <= m[f"wf{w + 1}"] + 1e-12
    assert m[f"wp{w}"] <= m[f"wp{w + 1}"] + 1e-12


@SETTINGS
@given(doc=log_docs(), data=st.data())
def test_streaming_equals_batch(doc, data):
    """A log cut after task k's end (a partial log) gives the same per-task values for tasks 1 … k."""
    K = len(doc["tasks"])
    ends = [i for i, p in enumerate(doc["points"]) if p["task_end"]]
    k = data.draw(st.integers(0, K - 1))
    cut = {**doc, "points": doc["points"][: ends[k] + 1], "partial": True}
    full = compute_metrics(EvaluationLog.parse(doc), windows=WINDOWS)
    part = compute_metrics(EvaluationLog.parse(cut), windows=WINDOWS)
    assert part.finished_tasks == k + 1
    for metric_id, value in full.metrics.items():
        if isinstance(value, list):
            got = part.metrics[metric_id]
            assert got[k + 1 :] == [None] * (K - k - 1)
            for x, y in zip(got[: k + 1], value[: k + 1], strict=True):
                assert (x is None) == (y is None) and (x is None or math.isclose(x, y, abs_tol=1e-12)), (
                    metric_id
                )
    if k == K - 1:
        assert part.metrics == full.metrics
