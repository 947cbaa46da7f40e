"""Options, errors, partial logs, evidence, class statistics and several runs."""

from __future__ import annotations

import copy
import math
import statistics

import numpy as np
import pytest

from clgate.metrics import CL_CRITERIA, LogArrays, compute_metrics, compute_runs, metric_info
from clgate.schemas import EvaluationLog
from clgate.schemas.metrics import MetricsResult, RunsResult


@pytest.fixture
def doc(make_log):
    return make_log(21, sizes=[2, 1, 3], future=True, max_between=6)


@pytest.mark.parametrize(
    "options, message",
    [
        pytest.param({"windows": [1]}, "windows", id="window-1"),
        pytest.param({"windows": [2.5]}, "windows", id="window-float"),
        pytest.param({"weights": [1 / 6] * 6}, "weights: expected 7", id="weights-length"),
        pytest.param({"weights": [0.5] * 7}, "weights: must sum to 1", id="weights-sum"),
        pytest.param(
            {"weights": [-0.1, 0.3, 0.2, 0.2, 0.2, 0.1, 0.1]}, "weights: must be finite", id="weights-neg"
        ),
        pytest.param({"epsilon": 0.5}, "epsilon", id="epsilon"),
        pytest.param({"confidence": 1.0}, "confidence", id="confidence"),
        pytest.param({"task_accuracy": "weighted"}, "task_accuracy", id="mode"),
    ],
)
def test_bad_options_raise_value_errors_naming_the_argument(doc, options, message):
    with pytest.raises(ValueError, match=message):
        compute_metrics(EvaluationLog.parse(doc), **options)


def test_windows_must_be_a_sequence(doc):
    with pytest.raises(TypeError, match="windows: expected a sequence"):
        compute_metrics(EvaluationLog.parse(doc), windows=10)


def test_micro_needs_counts(make_log):
    log = EvaluationLog.parse(make_log(1, counts=False))
    with pytest.raises(ValueError, match="task_accuracy: 'micro'"):
        compute_metrics(log, task_accuracy="micro")


def test_a_baseline_over_other_classes_is_rejected(make_log, doc):
    other = EvaluationLog.parse(make_log(2, sizes=[1, 1]))
    with pytest.raises(ValueError, match="baseline: has 2 classes"):
        compute_metrics(EvaluationLog.parse(doc), baseline=other)


def test_micro_differs_from_macro_when_class_sizes_differ():
    points = [{"iteration": 1, "task": 1, "task_end": True, "correct": [9, 0], "total": [10, 1]}]
    log = EvaluationLog.parse({"tasks": [[0, 1]], "points": points})
    assert compute_metrics(log).metrics["acc"] == [pytest.approx(0.45)]
    assert compute_metrics(log, task_accuracy="micro").metrics["acc"] == [pytest.approx(9 / 11)]


def test_k1_log():
    log = EvaluationLog.parse(
        {
            "tasks": [[0, 1]],
            "points": [
                {"iteration": 0, "task": 1, "accuracy": [0.2, 0.1]},
                {"iteration": 5, "task": 1, "task_end": True, "accuracy": [0.9, 0.7]},
            ],
        }
    )
    result = compute_metrics(log, windows=[2])
    m = result.metrics
    assert m["acc"] == [pytest.approx(0.8)] and m["mica"] == [0.7] and m["af"] == [None]
    assert m["wamica"] == pytest.approx(0.7) and m["wc_acc"] == pytest.approx(0.8)
    assert m["wp2"] == pytest.approx(0.65) and m["wf2"] == 0.0
    for metric_id in ("bwt", "bwt_lifetime", "rem", "bwt_plus", "fwt_lifetime", "af", "forg", "min_acc"):
        assert "at least 2 finished tasks" in result.reasons[metric_id]


def test_partial_log_has_k_entries_and_scalars_over_finished_tasks(doc):
    ends = [i for i, p in enumerate(doc["points"]) if p["task_end"]]
    cut = {
        **copy.deepcopy(doc),
        "points": doc["points"][: ends[1] + 2],
        "partial": True,
    }  # one point into task 3
    result = compute_metrics(EvaluationLog.parse(cut))
    assert result.finished_tasks == 2 and "partial" in result.notes
    assert len(result.metrics["acc"]) == 3 and result.metrics["acc"][2] is None
    full = compute_metrics(
        EvaluationLog.parse({**doc, "points": doc["points"][: ends[1] + 1], "partial": True})
    )
    assert result.metrics == full.metrics  # points after the last finished task end are outside the horizon
    assert [c.final_accuracy is None for c in result.classes] == [
        t == 2 for t in LogArrays.from_log(EvaluationLog.parse(doc)).class_task
    ]


def test_partial_log_without_a_task_end(doc):
    cut = {**doc, "points": doc["points"][:1], "partial": True}
    cut["points"] = [{**cut["points"][0], "task_end": False}]
    cut.pop("resources")
    result = compute_metrics(EvaluationLog.parse(cut))
    assert result.finished_tasks == 0
    for metric_id, value in result.metrics.items():
        assert value is None or value == [None] * 3, metric_id
        assert result.reasons[metric_id], metric_id


def test_task_end_only_logs_note_the_continual_metrics(make_log):
    result = compute_metrics(EvaluationLog.parse(make_log(4, n_tasks=3, only_ends=True)), windows=[5])
    noted = {mid for mid in result.metrics if "continual" in metric_info(mid).needs}
    assert set(result.notes) == noted and result.metrics["min_acc"][2] is not None


def test_evidence_points_at_the_values(doc):
    log = EvaluationLog.parse(doc)
    a = LogArrays.from_log(log)
    result = compute_metrics(log, windows=[3])
    for k, ev in enumerate(result.evidence["mica"]):
        assert a.r[k, ev["class"]] == ev["value"] == result.metrics["mica"][k]
        assert ev["class_name"] == a.class_names[ev["class"]]
    for k, ev in enumerate(result.evidence["min_class_acc"]):
        if k == 0:
            assert ev is None
            continue
        assert a.class_acc[ev["point"], ev["class"]] == ev["value"] == result.metrics["min_class_acc"][k]
        assert a.iterations[ev["point"]] == ev["iteration"]
        assert a.task_end_idx[ev["task"] - 1] < ev["point"] <= a.task_end_idx[k]
    for k, ev in enumerate(result.evidence["min_acc"]):
        if ev is None:
            continue
        mins = [t["min"] for t in ev["tasks"]]
        assert math.isclose(sum(mins) / len(mins), result.metrics["min_acc"][k])
        for t in ev["tasks"]:
            assert a.task_acc[t["point"], t["task"] - 1] == t["min"]
    for prefix in ("wf3", "wp3"):
        tasks = result.evidence[prefix]["tasks"]
        assert math.isclose(np.mean([t["value"] for t in tasks]), result.metrics[prefix])
        for t in tasks:
            if t["value"] > 0:
                i = t["task"] - 1
                change = a.task_acc[t["to_point"], i] - a.task_acc[t["from_point"], i]
                assert math.isclose(abs(change), t["value"]) and t["from_point"] < t["to_point"]
                between = ~np.isnan(a.task_acc[t["from_point"] : t["to_point"] + 1, i])
                assert between.sum() <= 3  # both ends inside one window of 3 evaluations of task i
    ev = result.evidence["wc_acc"]
    assert ev["point"] == a.task_end_idx[-1] and ev["task"] == 3


def test_class_stats_carry_wilson_bounds(doc):
    result = compute_metrics(EvaluationLog.parse(doc), confidence=0.9)
    for c in result.classes:
        assert c.final_lcb is not None and c.final_lcb <= c.final_accuracy
        assert c.final_correct / c.final_total == pytest.approx(c.final_accuracy)
        if c.min_after_learned is not None:
            assert c.min_after_learned_lcb <= c.min_after_learned


def test_results_round_trip_through_json(doc):
    log = EvaluationLog.parse(doc)
    result = compute_metrics(log, baseline=log)
    assert MetricsResult.model_validate_json(result.model_dump_json()) == result
    assert result.metrics["class_regression"] == 0.0 and set(result.class_deltas) == {0.0}
    runs = compute_runs([log, log])
    assert RunsResult.model_validate_json(runs.model_dump_json()) == runs


def test_runs_aggregate_mean_std_worst_and_cl_stability(make_log, reference, reference_stability):
    docs = [make_log(40 + s, sizes=[2, 2, 1], future=True) for s in range(3)]
    tasks = docs[0]["tasks"]
    docs = [make_log(40 + s, tasks=tasks, future=True) for s in range(3)]
    runs = compute_runs([EvaluationLog.parse(d) for d in docs], windows=[10])
    per_run = [reference(d, windows=(10,)) for d in docs]
    for metric_id in ("acc", "mica", "wamica", "af", "wf10", "ce"):
        agg = runs.aggregates[metric_id]
        values = np.array(
            [
                [np.nan if v is None else v for v in np.atleast_1d(np.array(r[metric_id], dtype=float))]
                for r in per_run
            ]
        )
        worst = values.min(axis=0) if metric_info(metric_id).higher_is_better else values.max(axis=0)
        got = [np.nan if v is None else v for v in np.atleast_1d(np.array(agg.worst, dtype=float))]
        np.testing.assert_allclose(got, worst)
        got_std = [np.nan if v is None else v for v in np.atleast_1d(np.array(agg.std, dtype=float))]
        np.testing.assert_allclose(got_std, np.std(values, axis=0, ddof=1))
        assert runs.metrics[metric_id] == agg.mean
    criteria = [[r[c] for c in CL_CRITERIA] for r in per_run]
    assert runs.metrics["cl_stability"] == pytest.approx(reference_stability(criteria))
    assert runs.metrics["cl_stability"] == pytest.approx(
        1 - sum(statistics.stdev(col) / 7 for col in zip(*criteria, strict=True))
    )


def test_one_run_has_no_stability_and_runs_must_share_tasks(make_log):
    one = compute_runs([EvaluationLog.parse(make_log(1, future=True))])
    assert one.metrics["cl_stability"] is None and "several runs" in one.reasons["cl_stability"]
    assert one.aggregates["acc"].std == [None] * len(one.metrics["acc"])
    with pytest.raises(ValueError, match="logs\\[1\\]"):
        compute_runs(
            [EvaluationLog.parse(make_log(1, sizes=[1, 2])), EvaluationLog.parse(make_log(2, sizes=[2, 1]))]
        )
    with pytest.raises(ValueError, match="logs"):
        compute_runs([])


def _final_only(acc: list[float], partial: bool = False) -> EvaluationLog:
    points = [{"iteration": 1, "task": 1, "task_end": True, "accuracy": [acc[0], None]}]
    if not partial:
        points.append({"iteration": 2, "task": 2, "task_end": True, "accuracy": acc})
    return EvaluationLog.parse({"tasks": [[0], [1]], "points": points, "partial": partial})


def test_class_regression_by_hand():
    base = _final_only([0.9, 0.6])
    worse = compute_metrics(_final_only([0.7, 0.65]), baseline=base)
    assert worse.metrics["class_regression"] == pytest.approx(0.2)
    assert worse.evidence["class_regression"]["class"] == 0
    assert worse.class_deltas == [pytest.approx(-0.2), pytest.approx(0.05)]
    better = compute_metrics(_final_only([0.95, 0.7]), baseline=base)
    assert better.metrics["class_regression"] == pytest.approx(-0.05)  # every class improved
    unfinished = compute_metrics(_final_only([0.9, 0.6]), baseline=_final_only([0.9, 0.6], partial=True))
    assert unfinished.metrics["class_regression"] is None
    assert "baseline not finished" in unfinished.reasons["class_regression"]


def test_a_baseline_with_accuracies_only_serves_a_micro_run():
    counts = EvaluationLog.parse(
        {
            "tasks": [[0], [1]],
            "points": [
                {"iteration": 1, "task": 1, "task_end": True, "correct": [9, 0], "total": [10, 0]},
                {"iteration": 2, "task": 2, "task_end": True, "correct": [6, 8], "total": [10, 10]},
            ],
        }
    )
    result = compute_metrics(counts, task_accuracy="micro", baseline=_final_only([0.9, 0.6]))
    assert result.metrics["class_regression"] == pytest.approx(0.3)
