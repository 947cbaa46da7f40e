"""FMECA worksheet: occurrence scale boundaries, RPN, the action-priority table, ordering, matrix."""

from __future__ import annotations

import pytest

from clgate.fmeca import action_priority, build_worksheet, criticality_matrix, occurrence_rating
from clgate.schemas.policy import FmecaConfig, OccurrenceRow, PriorityRow


# ---------------------------------------------------------------- occurrence scale
# The default scale is for classifier error rates (share of a class's test images misclassified).
@pytest.mark.parametrize(
    "rate, at, below",
    [
        (0.50, 10, 9),
        (0.30, 9, 8),
        (0.20, 8, 7),
        (0.10, 7, 6),
        (0.05, 6, 5),
        (0.02, 5, 4),
        (0.01, 4, 3),
        (0.005, 3, 2),
        (0.001, 2, 1),
    ],
)
def test_default_scale_boundaries(rate, at, below):
    assert occurrence_rating(rate) == at  # a rate exactly on a boundary gets that row's rating
    assert occurrence_rating(rate * 0.999) == below  # just under it, the next one down
    assert occurrence_rating(min(1.0, rate * 1.001)) == at


@pytest.mark.parametrize("rate, rating", [(1.0, 10), (0.75, 10), (1e-6, 1), (0.0, 1), (None, 10)])
def test_default_scale_ends(rate, rating):
    assert occurrence_rating(rate) == rating


def test_default_scale_discriminates_classifier_error_rates():
    # typical per-class errors of a usable classifier spread over the scale instead of all rating 10
    ratings = [occurrence_rating(e) for e in (0.6, 0.35, 0.25, 0.12, 0.07, 0.03, 0.015, 0.007, 0.002, 0.0)]
    assert ratings == [10, 9, 8, 7, 6, 5, 4, 3, 2, 1]
    assert FmecaConfig().occurrence_otherwise == 1 and FmecaConfig().default_severity is None


def test_boundary_from_one_minus_accuracy_float_noise():
    # 1 - 0.9 = 0.09999999999999998 must still be "10 %"
    assert occurrence_rating(1 - 0.9) == 7
    assert occurrence_rating(1 - 0.98) == 5
    assert occurrence_rating(1 - 0.7) == 9


def test_custom_scale():
    scale = [OccurrenceRow(at_least=0.2, rating=9), OccurrenceRow(at_least=0.05, rating=5)]
    assert [occurrence_rating(r, scale, 1) for r in (0.3, 0.2, 0.1, 0.05, 0.01)] == [9, 9, 5, 5, 1]


def test_aiag_scale_is_configurable_from_a_policy(policy_of):
    from clgate.schemas.policy import AIAG_PFMEA_OCCURRENCE_SCALE

    rows = [{"at_least": a, "rating": r} for a, r in AIAG_PFMEA_OCCURRENCE_SCALE]
    policy = policy_of(
        {"metric": "acc", "floor": 0.1}, fmeca={"occurrence_scale": rows, "occurrence_otherwise": 2}
    )
    cfg = policy.fmeca
    assert occurrence_rating(0.1, cfg.occurrence_scale, cfg.occurrence_otherwise) == 10
    assert occurrence_rating(1 / 20, cfg.occurrence_scale, cfg.occurrence_otherwise) == 9
    assert occurrence_rating(0.0, cfg.occurrence_scale, cfg.occurrence_otherwise) == 2


# ---------------------------------------------------------------- action priority
@pytest.mark.parametrize(
    "s, o, d, ap",
    [
        (10, 10, 10, "High"),
        (9, 4, 1, "Medium"),
        (9, 4, 2, "High"),
        (9, 2, 7, "High"),
        (9, 2, 5, "Medium"),
        (9, 3, 4, "Low"),
        (9, 1, 10, "Low"),
        (8, 8, 1, "High"),
        (7, 6, 1, "Medium"),
        (7, 4, 7, "High"),
        (7, 4, 6, "Medium"),
        (7, 2, 5, "Medium"),
        (7, 2, 4, "Low"),
        (6, 8, 5, "High"),
        (5, 8, 4, "Medium"),
        (4, 6, 2, "Medium"),
        (4, 6, 1, "Low"),
        (4, 4, 7, "Medium"),
        (4, 4, 6, "Low"),
        (3, 8, 5, "Medium"),
        (2, 9, 4, "Low"),
        (2, 7, 10, "Low"),
        (1, 10, 10, "Low"),
    ],
)
def test_default_action_priority_table(s, o, d, ap):
    assert action_priority(s, o, d) == ap


def test_severity_weighs_first():
    # the same RPN (= 120) gets different priorities: S carries more weight than O, and O more than D
    assert action_priority(10, 3, 4) == "Low" and 10 * 3 * 4 == 120
    assert action_priority(4, 10, 3) == "Medium"
    assert action_priority(8, 5, 3) == "Medium"
    # highest S with a frequent failure is High whatever the detection
    assert all(action_priority(10, 8, d) == "High" for d in range(1, 11))


def test_custom_priority_table_first_match_wins():
    table = [
        PriorityRow(severity=(8, 10), occurrence=(1, 10), detection=(1, 10), priority="High"),
        PriorityRow(severity=(1, 10), occurrence=(5, 10), detection=(1, 10), priority="Medium"),
    ]
    assert action_priority(9, 1, 1, table) == "High"
    assert action_priority(2, 6, 1, table) == "Medium"
    assert action_priority(2, 4, 1, table) == "Low"  # no row: Low


# ---------------------------------------------------------------- worksheet
def test_worksheet_ratings_rpn_and_order(make_result):
    classes = [
        {"final_accuracy": 0.99, "final_correct": 99, "final_total": 100},  # ant: O 4
        {
            "final_accuracy": 0.9,
            "final_correct": 90,
            "final_total": 100,
            "min_after_learned": 0.3,
            "min_after_learned_iteration": 70,
        },  # bee: 7/10
        {"final_accuracy": 0.998, "final_correct": 499, "final_total": 500},  # cat: O 2
        {"final_accuracy": 0.96, "final_correct": 96, "final_total": 100},  # dog: O 5
        {"final_accuracy": 1.0, "final_correct": 100, "final_total": 100},  # eel: O 1
        {"final_accuracy": 0.95, "final_correct": 95, "final_total": 100},  # fox: O 6
    ]
    config = FmecaConfig(
        default_severity=5, severity={"ant": 10, "4": 9}, default_detection=3, detection={"cat": 8}
    )
    sheet = build_worksheet([make_result(classes=classes)], config)
    rows = {r.class_name: r for r in sheet.rows}
    assert (rows["ant"].severity, rows["ant"].occurrence_final, rows["ant"].detection) == (10, 4, 3)
    assert rows["ant"].rpn_final == 120 and rows["ant"].priority_final == "High"
    assert rows["eel"].severity == 9  # by class id
    assert (
        rows["cat"].detection == 8
        and rows["cat"].occurrence_final == 2
        and rows["cat"].rpn_final == 5 * 2 * 8
    )
    assert rows["bee"].occurrence_final == 7 and rows["bee"].occurrence_worst == 10
    assert rows["bee"].worst_error == pytest.approx(0.7) and rows["bee"].worst_iteration == 70
    assert rows["fox"].occurrence_worst == 6 and rows["dog"].occurrence_worst == 5
    for r in sheet.rows:
        assert r.rpn_worst == r.severity * r.occurrence_worst * r.detection
    # sorted: priority (worst) first, then RPN (worst)
    rank = {"High": 2, "Medium": 1, "Low": 0}
    keys = [(rank[r.priority_worst], r.rpn_worst) for r in sheet.rows]
    assert keys == sorted(keys, reverse=True)
    # the severe class comes first although its error is the second smallest: ant High (S 10, RPN 120);
    # then Medium by RPN: bee 5·10·3, fox 5·6·3; then Low: cat 5·2·8, dog 5·5·3, eel 9·1·3
    assert [r.class_name for r in sheet.rows] == ["ant", "bee", "fox", "cat", "dog", "eel"]
    assert [r.priority_worst for r in sheet.rows] == ["High", "Medium", "Medium", "Low", "Low", "Low"]
    assert sheet.unrated == 0


def test_per_class_severities_reorder_the_worksheet(make_result):
    # the same errors, two policies: the severities, not only the error rates, decide the order
    classes = [
        {"final_accuracy": acc, "final_correct": round(acc * 100), "final_total": 100}
        for acc in (0.70, 0.80, 0.90, 0.97)
    ]  # ant O 9, bee O 8, cat O 7, dog O 5
    flat = build_worksheet([make_result(classes=classes)], FmecaConfig(default_severity=5))
    assert [r.class_name for r in flat.rows] == ["ant", "bee", "cat", "dog"]
    critical = FmecaConfig(default_severity=3, severity={"dog": 10, "cat": 8}, default_detection=5)
    sheet = build_worksheet([make_result(classes=classes)], critical)
    assert [r.class_name for r in sheet.rows] == ["cat", "dog", "ant", "bee"]
    assert [r.priority_worst for r in sheet.rows] == ["High", "High", "Medium", "Medium"]
    assert [r.rpn_worst for r in sheet.rows] == [8 * 7 * 5, 10 * 5 * 5, 3 * 9 * 5, 3 * 8 * 5]


def test_nothing_rated_means_no_mode_is_high(make_result):
    # no severity anywhere: every mode is unrated (no S, RPN, priority), not defaulted into High
    classes = [
        {"final_accuracy": 0.0, "final_correct": 0, "final_total": 40},
        {"final_accuracy": 0.5, "final_correct": 20, "final_total": 40},
        {"final_accuracy": 0.95, "final_correct": 38, "final_total": 40},
    ]
    sheet = build_worksheet([make_result(classes=classes)], FmecaConfig())
    assert sheet.unrated == 3
    assert all(not r.rated and r.severity is None for r in sheet.rows)
    assert all(
        r.priority_worst is None and r.priority_final is None and r.rpn_worst is None for r in sheet.rows
    )
    assert sum(map(sum, sheet.matrix)) == 0
    assert [r.class_name for r in sheet.rows] == ["ant", "bee", "cat"]  # unrated: largest error first
    assert [r.occurrence_worst for r in sheet.rows] == [10, 10, 6]  # O is still measured


def test_partly_rated_sheet_puts_unrated_modes_last(make_result):
    classes = [{"final_accuracy": 0.0}, {"final_accuracy": 0.99}]
    sheet = build_worksheet([make_result(classes=classes)], FmecaConfig(severity={"bee": 2}))
    assert [(r.class_name, r.priority_worst) for r in sheet.rows] == [("bee", "Low"), ("ant", None)]
    assert sheet.unrated == 1 and sum(map(sum, sheet.matrix)) == 1


def test_fmeca_rule_on_an_unrated_sheet_cannot_be_evaluated(judge, make_result):
    runs = [make_result(classes=[{"final_accuracy": 0.0}, {"final_accuracy": 1.0}])]
    res = judge({"fmeca": "priority", "fail_at": "High"}, runs)
    assert res.status == "error" and "no failure mode is rated" in res.message
    part = judge({"fmeca": "priority", "fail_at": "High"}, runs, fmeca={"severity": {"bee": 9}})
    assert part.status == "pass" and "1 mode(s) unrated" in part.message


def test_final_and_worst_occurrence_differ_for_the_stability_gap(make_result):
    classes = [
        {
            "final_accuracy": 0.999,
            "final_correct": 999,
            "final_total": 1000,
            "min_after_learned": 0.9,
            "min_after_learned_iteration": 20,
        }
    ]
    row = build_worksheet([make_result(classes=classes)], FmecaConfig(default_severity=8)).rows[0]
    assert (row.occurrence_final, row.occurrence_worst) == (2, 7)  # 0.1 % → 2; 10 % → 7
    assert (row.priority_final, row.priority_worst) == ("Medium", "High")


def test_over_runs_worst_and_mean(make_result):
    runs = [
        make_result(classes=[{"final_accuracy": 0.9, "final_correct": 90, "final_total": 100}], seed=1),
        make_result(classes=[{"final_accuracy": 0.99, "final_correct": 99, "final_total": 100}], seed=2),
    ]
    worst = build_worksheet(runs, FmecaConfig()).rows[0]
    mean = build_worksheet(runs, FmecaConfig(over_runs="mean")).rows[0]
    assert worst.final_error == pytest.approx(0.1) and worst.occurrence_final == 7 and worst.seed == 1
    assert mean.final_error == pytest.approx(0.055) and mean.occurrence_final == 6


def test_wilson_bound_rates_the_upper_error(make_result):
    classes = [{"final_accuracy": 1.0, "final_correct": 50, "final_total": 50, "final_lcb": 0.93}]
    point = build_worksheet([make_result(classes=classes)], FmecaConfig()).rows[0]
    upper = build_worksheet([make_result(classes=classes)], FmecaConfig(bound="wilson95")).rows[0]
    assert point.occurrence_final == 1 and upper.occurrence_final == 6  # 0 errors in 50 is not "never"


def test_criticality_matrix_counts(make_result):
    classes = [{"final_accuracy": 0.5}] * 3 + [
        {"final_accuracy": 0.99, "final_correct": 99, "final_total": 100}
    ]
    config = FmecaConfig(default_severity=5, severity={"ant": 10})
    sheet = build_worksheet([make_result(classes=classes)], config)
    m = sheet.matrix
    assert m[0][9] == 1  # S 10, O 10: ant
    assert m[10 - 5][9] == 2  # S 5, O 10: bee, cat
    assert m[10 - 5][3] == 1  # S 5, O 4 (1 %): dog
    assert sum(map(sum, m)) == 4
    assert criticality_matrix(sheet.rows) == m


def test_unknown_class_in_ratings_is_a_decision_error(good_log, policy_of):
    from clgate.policy import decide

    policy = policy_of({"metric": "acc", "floor": 0.1}, fmeca={"severity": {"ant": 9, "gnat": 9}})
    d = decide([good_log()], policy)
    assert d.verdict == "ERROR"
    assert d.errors == ["fmeca.severity: no class named 'gnat'"]


def test_worst_equal_to_final_still_names_the_iteration(make_result):
    # a forgotten class: 0 % at the end and already 0 % at iteration 120
    classes = [
        {
            "final_accuracy": 0.0,
            "final_correct": 0,
            "final_total": 40,
            "min_after_learned": 0.0,
            "min_after_learned_iteration": 120,
        }
    ]
    row = build_worksheet([make_result(classes=classes)], FmecaConfig()).rows[0]
    assert row.final_error == row.worst_error == 1.0 and row.worst_iteration == 120
