"""Rule semantics, one behaviour per test, on metrics results written by hand.

Convention under test: a floor passes at equality, a ceiling passes at equality (margin 0).
"""

from __future__ import annotations

import pytest

from clgate.policy import verdict_of


# ---------------------------------------------------------------- thresholds and the edge
@pytest.mark.parametrize(
    "value, status",
    [
        pytest.param(0.5, "pass", id="equal"),
        pytest.param(0.5 - 1e-6, "fail", id="just-below"),
        pytest.param(0.5 + 1e-6, "pass", id="just-above"),
    ],
)
def test_floor_passes_at_equality(judge, make_result, value, status):
    r = judge({"metric": "wamica", "floor": 0.5}, [make_result({"wamica": value})])
    assert r.status == status
    assert r.threshold == 0.5 and r.comparison == ">="
    assert r.margin == pytest.approx(value - 0.5)


def test_floor_equality_survives_float_noise(judge, make_result):
    # 0.1 + 0.2 + 0.5 == 0.8000000000000002 and 1 - 0.2 == 0.8; 0.7999999999999999 still meets 0.8
    r = judge({"metric": "wamica", "floor": 0.8}, [make_result({"wamica": 0.7999999999999999})])
    assert r.status == "pass"


@pytest.mark.parametrize(
    "value, status",
    [pytest.param(0.3, "pass", id="equal"), pytest.param(0.3 + 1e-6, "fail", id="just-above")],
)
def test_ceiling_passes_at_equality(judge, make_result, value, status):
    r = judge({"metric": "wf10", "ceiling": 0.3}, [make_result({"wf10": value})])
    assert r.status == status and r.comparison == "<="


def test_floor_and_ceiling_judges_the_tighter_side(judge, make_result):
    r = judge({"metric": "wamica", "floor": 0.2, "ceiling": 0.6}, [make_result({"wamica": 0.65})])
    assert r.status == "fail" and r.comparison == "<=" and r.threshold == 0.6


# ---------------------------------------------------------------- at
MICA = [0.9, 0.4, 0.6]  # worst at task 2, final 0.6


@pytest.mark.parametrize(
    "at, value, task",
    [
        pytest.param("final", 0.6, 3, id="final"),
        pytest.param("task:1", 0.9, 1, id="task1"),
        pytest.param("worst", 0.4, 2, id="worst"),
        pytest.param("all", 0.4, 2, id="all"),
    ],
)
def test_at_picks_the_task(judge, make_result, at, value, task):
    r = judge({"metric": "mica", "at": at, "floor": 0.5}, [make_result({"mica": MICA})])
    assert r.value == value and r.evidence["task"] == task
    assert r.status == ("pass" if value >= 0.5 else "fail")


def test_at_all_lists_every_failing_task(judge, make_result):
    r = judge({"metric": "mica", "at": "all", "floor": 0.7}, [make_result({"mica": MICA})])
    assert r.status == "fail" and r.evidence["failing_tasks"] == [2, 3]


def test_at_worst_skips_tasks_undefined_by_definition(judge, make_result):
    r = judge({"metric": "forg", "at": "worst", "ceiling": 0.2}, [make_result({"forg": [None, 0.1, 0.3]})])
    assert r.value == 0.3 and r.evidence["task"] == 3 and r.status == "fail"


def test_at_task_beyond_the_log_is_an_error(judge, make_result):
    r = judge({"metric": "mica", "at": "task:4", "floor": 0.5}, [make_result({"mica": MICA})])
    assert r.status == "error" and "task:4 does not exist" in r.message


def test_final_null_is_an_error_not_a_pass(judge, make_result):
    res = make_result({"fwt_lifetime": None}, reasons={"fwt_lifetime": "needs future tasks evaluated"})
    r = judge({"metric": "fwt_lifetime", "floor": 0.0}, [res])
    assert r.status == "error" and r.passed is None
    assert "needs future tasks evaluated" in r.message
    assert verdict_of([r]) == "ERROR"


def test_metric_missing_from_results_is_an_error(judge, make_result):
    r = judge({"metric": "wamica", "floor": 0.5}, [make_result({"acc": [0.9, 0.8, 0.7]})])
    assert r.status == "error" and "not computed" in r.message


# ---------------------------------------------------------------- bound
def test_bound_wilson95_judges_the_lower_bound(judge, make_result):
    res = make_result({"mica": [0.9, 0.8, 0.72], "mica_lcb": [0.8, 0.7, 0.62]})
    point = judge({"metric": "mica", "floor": 0.7}, [res])
    lower = judge({"metric": "mica", "floor": 0.7, "bound": "wilson95"}, [res])
    assert point.status == "pass" and point.value == 0.72
    assert lower.status == "fail" and lower.value == 0.62


def test_bound_wilson95_without_counts_is_an_error(judge, make_result):
    res = make_result(
        {"mica": [0.9, 0.8, 0.7], "mica_lcb": [None, None, None]},
        reasons={"mica_lcb": "needs correct/total counts"},
    )
    r = judge({"metric": "mica", "floor": 0.5, "bound": "wilson95"}, [res])
    assert r.status == "error" and "counts" in r.message


# ---------------------------------------------------------------- over_runs
def test_over_runs_worst_vs_mean(judge, make_result):
    runs = [
        make_result({"wamica": 0.8}, seed=11),
        make_result({"wamica": 0.5}, seed=12),
        make_result({"wamica": 0.8}, seed=13),
    ]
    worst = judge({"metric": "wamica", "floor": 0.6, "over_runs": "worst"}, runs)
    mean = judge({"metric": "wamica", "floor": 0.6, "over_runs": "mean"}, runs)
    assert worst.status == "fail" and worst.value == 0.5 and worst.evidence["seed"] == 12
    assert mean.status == "pass" and mean.value == pytest.approx(0.7)
    assert mean.evidence["over_runs"] == "mean"


def test_over_runs_worst_is_the_max_for_a_ceiling(judge, make_result):
    runs = [make_result({"wf10": 0.1}, seed=1), make_result({"wf10": 0.4}, seed=2)]
    r = judge({"metric": "wf10", "ceiling": 0.3}, runs)
    assert r.value == 0.4 and r.evidence["seed"] == 2 and r.status == "fail"


def test_over_runs_default_is_worst(judge, make_result):
    runs = [make_result({"wamica": 0.9}), make_result({"wamica": 0.55}, seed=1)]
    assert judge({"metric": "wamica", "floor": 0.6}, runs).status == "fail"


def test_mean_over_runs_with_a_missing_value_is_an_error(judge, make_result):
    runs = [make_result({"mica": [0.9, 0.8, 0.7]}), make_result({"mica": [0.9, 0.8, None]}, seed=1)]
    r = judge({"metric": "mica", "floor": 0.5, "over_runs": "mean"}, runs)
    assert r.status == "error" and "cannot average" in r.message


# ---------------------------------------------------------------- severity
def test_severity_warn_gives_warn_and_block_gives_fail(judge, make_result):
    res = [make_result({"wamica": 0.4})]
    warn = judge({"metric": "wamica", "floor": 0.5, "severity": "warn"}, res)
    block = judge({"metric": "wamica", "floor": 0.5}, res)
    assert (warn.status, warn.passed) == ("warn", False)
    assert (block.status, block.passed) == ("fail", False)
    assert verdict_of([warn]) == "WARN"
    assert verdict_of([warn, block]) == "FAIL"


def test_verdict_precedence(judge, make_result):
    ok = judge({"metric": "wamica", "floor": 0.1}, [make_result({"wamica": 0.4})])
    err = judge({"metric": "wamica", "floor": 0.1}, [make_result({"wamica": None})])
    fail = judge({"metric": "wamica", "floor": 0.5}, [make_result({"wamica": 0.4})])
    assert verdict_of([ok]) == "PASS"
    assert verdict_of([ok, fail, err]) == "ERROR"


# ---------------------------------------------------------------- per-class
CLASSES = [
    {"final_accuracy": 0.9, "min_after_learned": 0.85, "min_after_learned_iteration": 30},
    {
        "final_accuracy": 0.6,
        "min_after_learned": 0.2,
        "min_after_learned_iteration": 40,
        "final_lcb": 0.5,
        "min_after_learned_lcb": 0.12,
    },
    {"final_accuracy": 0.95, "min_after_learned": 0.9, "min_after_learned_iteration": 50},
    {"final_accuracy": 0.7, "min_after_learned": 0.7, "min_after_learned_iteration": 60},
    {"final_accuracy": 0.8},  # classes of the last task: nothing after their task ended
    {"final_accuracy": 0.75},
]


@pytest.mark.parametrize(
    "rule, value, cls, status",
    [
        pytest.param({"classes": ["bee"], "floor": 0.6}, 0.6, "bee", "pass", id="final-equal"),
        pytest.param({"classes": ["bee"], "floor": 0.61}, 0.6, "bee", "fail", id="final-below"),
        pytest.param(
            {"classes": ["ant", "bee"], "at": "min_after_learned", "floor": 0.3},
            0.2,
            "bee",
            "fail",
            id="after-learned",
        ),
        pytest.param(
            {"classes": [0, "cat"], "at": "min_after_learned", "floor": 0.8}, 0.85, "ant", "pass", id="by-id"
        ),
        pytest.param({"classes": ["bee"], "floor": 0.55, "bound": "wilson95"}, 0.5, "bee", "fail", id="lcb"),
        pytest.param({"classes": "*", "floor": 0.5}, 0.6, "bee", "pass", id="all-classes"),
    ],
)
def test_class_floor(judge, make_result, rule, value, cls, status):
    r = judge(rule, [make_result(classes=CLASSES)])
    assert r.value == value and r.evidence["class_name"] == cls and r.status == status


def test_class_floor_evidence_has_iteration_and_failing_list(judge, make_result):
    r = judge({"classes": "*", "at": "min_after_learned", "floor": 0.75}, [make_result(classes=CLASSES)])
    assert r.evidence["iteration"] == 40
    assert [f["name"] for f in r.evidence["failing_classes"]] == ["bee", "dog"]
    assert r.evidence["skipped_last_task"] == ["eel", "fox"]  # no point after their task end


def test_class_of_the_last_task_has_no_after_learned_value(judge, make_result):
    only = judge(
        {"classes": ["eel"], "at": "min_after_learned", "floor": 0.5}, [make_result(classes=CLASSES)]
    )
    assert only.status == "error" and "nothing to judge" in only.message and "'eel'" in only.message
    mixed = judge(
        {"classes": ["ant", "eel"], "at": "min_after_learned", "floor": 0.5}, [make_result(classes=CLASSES)]
    )
    assert mixed.status == "pass" and mixed.value == 0.85 and mixed.evidence["skipped_last_task"] == ["eel"]


def test_unknown_class_is_an_error(judge, make_result):
    r = judge({"classes": ["ant", "gnu"], "floor": 0.5}, [make_result(classes=CLASSES)])
    assert r.status == "error" and "unknown class(es) 'gnu'" in r.message


def test_class_floor_over_runs(judge, make_result):
    other = [dict(c) for c in CLASSES]
    other[1]["final_accuracy"] = 0.8
    runs = [make_result(classes=CLASSES, seed=5), make_result(classes=other, seed=6)]
    worst = judge({"classes": ["bee"], "floor": 0.65}, runs)
    mean = judge({"classes": ["bee"], "floor": 0.65, "over_runs": "mean"}, runs)
    assert worst.status == "fail" and worst.evidence["seed"] == 5
    assert mean.status == "pass" and mean.value == pytest.approx(0.7)


# ---------------------------------------------------------------- baseline
def test_baseline_absolute_drop_with_edge(judge, make_result):
    base = make_result({"mica": [0.9, 0.8, 0.75]})
    at_edge = judge({"baseline": "mica", "max_drop": 0.05}, [make_result({"mica": [0.9, 0.8, 0.70]})], base)
    over = judge({"baseline": "mica", "max_drop": 0.05}, [make_result({"mica": [0.9, 0.8, 0.69]})], base)
    assert at_edge.status == "pass" and at_edge.value == pytest.approx(0.05)
    assert over.status == "fail" and over.value == pytest.approx(0.06)
    assert over.evidence["baseline"] == 0.75 and over.evidence["candidate"] == 0.69


def test_baseline_relative_drop(judge, make_result):
    base = make_result({"wamica": 0.5})
    r = judge(
        {"baseline": "wamica", "max_drop": 0.1, "relative": True}, [make_result({"wamica": 0.44})], base
    )
    assert r.value == pytest.approx(0.12) and r.status == "fail"


def test_baseline_lower_is_better_metric_counts_an_increase_as_the_drop(judge, make_result):
    base = make_result({"wf10": 0.1})
    r = judge({"baseline": "wf10", "max_drop": 0.05}, [make_result({"wf10": 0.2})], base)
    assert r.value == pytest.approx(0.1) and r.status == "fail"
    better = judge({"baseline": "wf10", "max_drop": 0.0}, [make_result({"wf10": 0.05})], base)
    assert better.status == "pass"


def test_baseline_any_class(judge, make_result):
    base_classes = [dict(c) for c in CLASSES]
    base_classes[3]["final_accuracy"] = 0.9  # dog: 0.9 → 0.7
    r = judge(
        {"baseline": "classes", "max_drop": 0.1},
        [make_result(classes=CLASSES)],
        make_result(classes=base_classes),
    )
    assert r.status == "fail" and r.value == pytest.approx(0.2) and r.evidence["class_name"] == "dog"


def test_baseline_rule_without_baseline_is_an_error(judge, make_result):
    r = judge({"baseline": "mica", "max_drop": 0.1}, [make_result({"mica": [0.9, 0.8, 0.7]})])
    assert r.status == "error" and "--baseline" in r.message


# ---------------------------------------------------------------- fmeca rules
def test_fmeca_priority_and_rpn_rules(judge, make_result):
    classes = [{"final_accuracy": 0.99, "final_correct": 99, "final_total": 100}] * 5 + [
        {"final_accuracy": 0.5, "final_correct": 50, "final_total": 100}
    ]
    fmeca = {"default_severity": 9, "default_detection": 2}
    runs = [make_result(classes=classes)]
    # fox: S 9, O 10 (error 0.5), D 2 → High, RPN 180; others: O 7 (1 in 100) → High (S 9-10, O 6-7)
    high = judge({"fmeca": "priority", "fail_at": "High"}, runs, fmeca=fmeca)
    assert high.status == "fail" and high.value == 6 and high.evidence["class_name"] == "fox"
    rpn_edge = judge({"fmeca": "rpn", "limit": 180}, runs, fmeca=fmeca)
    rpn_ok = judge({"fmeca": "rpn", "limit": 181}, runs, fmeca=fmeca)
    assert rpn_edge.status == "fail" and rpn_edge.value == 180  # RPN >= limit fails
    assert rpn_ok.status == "pass" and rpn_ok.margin == 0


def test_baseline_any_class_relative(judge, make_result):
    base_classes = [dict(c) for c in CLASSES]
    base_classes[1]["final_accuracy"] = 0.8  # bee: 0.8 → 0.6 is a 25 % relative drop
    base_classes[4]["final_accuracy"] = 0.0  # eel: 0 in the baseline cannot drop
    r = judge(
        {"baseline": "classes", "max_drop": 0.25, "relative": True},
        [make_result(classes=CLASSES)],
        make_result(classes=base_classes),
    )
    assert r.status == "pass" and r.value == pytest.approx(0.25) and r.evidence["class_name"] == "bee"
