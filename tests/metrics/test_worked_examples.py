"""The papers' worked examples quoted in ``docs/metrics.md``, and other values known by hand."""

from __future__ import annotations

import numpy as np
import pytest

from clgate.metrics import (
    cl_score,
    compute_metrics,
    rescaled_average_forgetting,
    wilson_interval,
    windowed_extremes,
)
from clgate.schemas import EvaluationLog


def random_classifier_log(sizes: list[int]) -> EvaluationLog:
    """Michel et al. §3.2: a random classifier, r[k][c] = 1/C_k for every seen class, at each task end."""
    tasks, at = [], 0
    for s in sizes:
        tasks.append(list(range(at, at + s)))
        at += s
    C = at
    points = []
    seen = 0
    for k, s in enumerate(sizes):
        seen += s
        points.append(
            {
                "iteration": 10 * (k + 1),
                "task": k + 1,
                "task_end": True,
                "accuracy": [1 / seen if c < seen else None for c in range(C)],
            }
        )
    return EvaluationLog.parse({"tasks": tasks, "points": points})


def rounded(values, digits=4):
    return [None if v is None else round(v, digits) for v in values]


def test_michel_random_classifier_tables():
    """Michel et al. tables 1-2: 5 tasks of 2 classes."""
    m = compute_metrics(random_classifier_log([2] * 5)).metrics
    assert rounded(m["acc"]) == [0.5, 0.25, 0.1667, 0.125, 0.1]
    assert rounded(m["af"]) == [None, 0.25, 0.2083, 0.1806, 0.1604]
    assert rounded(m["raa"]) == [0.1] * 5
    assert rounded(m["raf"]) == [None] + [0.1604] * 4
    assert m["mica"] == pytest.approx([0.5, 0.25, 1 / 6, 0.125, 0.1])
    assert rounded(m["forg"], 12) == rounded(m["af"], 12)  # a random classifier is best right after each task


def test_michel_prop_4_4_beta_form_for_equal_tasks():
    """With equal task sizes RAF_k = β_k · AF_k, β_k = (H_K - 1)(k - 1) / ((H_k - 1)(K - 1))."""
    K = 6
    af = np.r_[np.nan, np.random.default_rng(0).uniform(-0.2, 0.8, K - 1)]
    H = np.cumsum(1 / np.arange(1, K + 1))
    k = np.arange(2, K + 1)
    beta = (H[-1] - 1) * (k - 1) / ((H[k - 1] - 1) * (K - 1))
    np.testing.assert_allclose(rescaled_average_forgetting(af, np.full(K, 3))[1:], beta * af[1:])


def test_michel_random_classifier_unequal_tasks_raa_constant():
    """Prop. 4.3 holds for any task sizes: the random classifier's RAA is 1/C_K at every task."""
    m = compute_metrics(random_classifier_log([1, 3, 2, 4])).metrics
    assert m["raa"] == pytest.approx([0.1] * 4)


@pytest.mark.parametrize(
    "criteria, expected",
    [
        pytest.param([0.3825, 0.6664, 0, 0.1, 1, 1, 0.4492], 0.5140, id="naive"),
        pytest.param([0.5278, 0.9667, 0, 0.1, 1, 1, 0.4429], 0.5768, id="lwf"),
    ],
)
def test_diaz_rodriguez_table_1_cl_score(criteria, expected):
    assert round(cl_score(np.array(criteria), np.full(7, 1 / 7)), 4) == expected


def test_cl_score_uses_the_reported_criteria():
    log = EvaluationLog.parse(
        {
            "tasks": [[0], [1]],
            "points": [
                {"iteration": 1, "task": 1, "task_end": True, "accuracy": [0.9, 0.2]},
                {"iteration": 2, "task": 2, "task_end": True, "accuracy": [0.6, 0.8]},
            ],
            "resources": [
                {
                    "task": 1,
                    "model_params": 100,
                    "buffer_bytes": 0,
                    "train_bytes": 100,
                    "ops_train": 10,
                    "ops_pass": 1,
                },
                {
                    "task": 2,
                    "model_params": 200,
                    "buffer_bytes": 50,
                    "train_bytes": 100,
                    "ops_train": 5,
                    "ops_pass": 1,
                },
            ],
        }
    )
    m = compute_metrics(log).metrics
    # by hand: A = (0.9 + 0.6 + 0.8)/3, BWT = 0.6 - 0.9, REM = 0.7, BWT+ = 0, FWT = 0.2,
    # MS = (1 + 0.5)/2, SSS = 1 - (0 + 50/200)/2, CE = (0.1 + 0.2)/2
    expected = {
        "a_lifetime": 2.3 / 3,
        "bwt_lifetime": -0.3,
        "rem": 0.7,
        "bwt_plus": 0.0,
        "fwt_lifetime": 0.2,
        "ms": 0.75,
        "sss": 0.875,
        "ce": 0.15,
    }
    for key, value in expected.items():
        assert m[key] == pytest.approx(value), key
    crit = [expected[c] for c in ("a_lifetime", "rem", "bwt_plus", "fwt_lifetime", "ms", "sss", "ce")]
    assert m["cl_score"] == pytest.approx(sum(crit) / 7)
    assert compute_metrics(log, epsilon=10).metrics["ce"] == 1.0  # min(1, ...)


def test_delange_wp_counterexample_from_the_spec():
    """Window [.5, .2, .9]: the true WP is .7 (the public code's pruning gives .4)."""
    A = np.array([[0.5], [0.2], [0.9]])
    ext = windowed_extremes(A, np.array([0]), 3, 1, 3)
    assert ext.plasticity[0] == pytest.approx(0.7)
    assert ext.forgetting[0] == pytest.approx(0.3)


def test_delange_min_acc_excludes_the_task_end_itself_and_wc_acc_by_hand():
    log = EvaluationLog.parse(
        {
            "tasks": [[0], [1]],
            "points": [
                {"iteration": 1, "task": 1, "accuracy": [0.1, None]},  # before its end: not counted
                {"iteration": 2, "task": 1, "task_end": True, "accuracy": [0.9, None]},
                {"iteration": 3, "task": 2, "accuracy": [0.3, 0.5]},
                {"iteration": 4, "task": 2, "task_end": True, "accuracy": [0.7, 0.6]},
            ],
        }
    )
    m = compute_metrics(log, windows=[2]).metrics
    assert m["min_acc"] == [None, pytest.approx(0.3)]
    assert m["wc_acc"] == pytest.approx(0.6 / 2 + 0.5 * 0.3)
    assert m["forg"] == [None, pytest.approx(0.2)]
    assert m["wf2"] == pytest.approx((0.6 + 0.0) / 2)  # task 1: .9 → .3; task 2: .5 → .6 only rises
    assert m["wp2"] == pytest.approx((0.8 + 0.1) / 2)  # task 1: .1 → .9


def test_wilson_interval_known_values():
    lo, hi = wilson_interval(np.array([8, 0, 10]), np.array([10, 10, 10]))
    np.testing.assert_allclose(lo, [0.4902, 0.0, 0.7225], atol=1e-4)
    np.testing.assert_allclose(hi, [0.9433, 0.2775, 1.0], atol=1e-4)
    lo, hi = wilson_interval(np.array([0, 5, 7]), np.array([5, 5, 9]), confidence=0.9)
    assert (
        lo[0] == 0.0 and hi[1] == 1.0 and lo[2] <= 7 / 9 <= hi[2]
    )  # exact at the edges, no rounding residue
    with pytest.raises(ValueError, match="confidence"):
        wilson_interval(1, 2, confidence=1.0)
