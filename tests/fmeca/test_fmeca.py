"""FMECA worksheet: occurrence scale boundaries, RPN, the action-priority table, ordering, matrix."""

from __future__ import annotations

import pytest

from clgate.fmeca import action_priority, build_worksheet, criticality_matrix, occurrence_rating
from clgate.schemas.policy import FmecaConfig, OccurrenceRow, PriorityRow


# ---------------------------------------------------------------- occurrence scale
@pytest.mark.parametrize(
    "one_in, at, below",
    [(10, 10, 9), (20, 9, 8), (50, 8, 7), (100, 7, 6), (500, 6, 5), (2_000, 5, 4), (10_000, 4, 3), (100_000, 3, 2)],
)
def test_default_scale_boundaries(one_in, at, below):
    rate = 1 / one_in
    assert occurrence_rating(rate) == at  # a rate exactly on a boundary gets that row's rating
    assert occurrence_rating(rate * 0.999) == below  # just under it, the next one down
    assert occurrence_rating(min(1.0, rate * 1.001)) == at


@pytest.mark.parametrize("rate, rating", [(1.0, 10), (0.5, 10), (1e-6, 2), (0.0, 2), (None, 10)])
def test_default_scale_ends(rate, rating):
    assert occurrence_rating(rate) == rating


def test_boundary_from_one_minus_accuracy_float_noise():
    # 1 - 0.9 = 0.09999999999999998 must still be "1 in 10"
    assert occurrence_rating(1 - 0.9) == 10
    assert occurrence_rating(1 - 0.98) == 8


def test_custom_scale():
    scale = [OccurrenceRow(at_least=0.2, rating=9), OccurrenceRow(at_least=0.05, rating=5)]
    assert [occurrence_rating(r, scale, 1) for r in (0.3, 0.2, 0.1, 0.05, 0.01)] == [9, 9, 5, 5, 1]


# ---------------------------------------------------------------- action priority
@pytest.mark.parametrize(
    "s, o, d, ap",
    [
        (10, 10, 10, "High"), (9, 4, 1, "Medium"), (9, 4, 2, "High"), (9, 2, 7, "High"), (9, 2, 5, "Medium"),
        (9, 3, 4, "Low"), (9, 1, 10, "Low"), (8, 8, 1, "High"), (7, 6, 1, "Medium"), (7, 4, 7, "High"),
        (7, 4, 6, "Medium"), (7, 2, 5, "Medium"), (7, 2, 4, "Low"), (6, 8, 5, "High"), (5, 8, 4, "Medium"),
        (4, 6, 2, "Medium"), (4, 6, 1, "Low"), (4, 4, 7, "Medium"), (4, 4, 6, "Low"), (3, 8, 5, "Medium"),
        (2, 9, 4, "Low"), (2, 7, 10, "Low"), (1, 10, 10, "Low"),
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
        {"final_accuracy": 0.99, "final_correct": 99, "final_total": 100},                       # ant: O 7
        {"final_accuracy": 0.9, "final_correct": 90, "final_total": 100, "min_after_learned": 0.3,
         "min_after_learned_iteration": 70},                                                     # bee: 10/10
        {"final_accuracy": 0.998, "final_correct": 499, "final_total": 500},                     # cat: O 6
        {"final_accuracy": 0.96, "final_correct": 96, "final_total": 100},                       # dog: O 8
        {"final_accuracy": 1.0, "final_correct": 100, "final_total": 100},                       # eel: O 2
        {"final_accuracy": 0.95, "final_correct": 95, "final_total": 100},                       # fox: O 9
    ]
    config = FmecaConfig(default_severity=5, severity={"ant": 10, "4": 9}, default_detection=3,
                         detection={"cat": 8})
    sheet = build_worksheet([make_result(classes=classes)], config)
    rows = {r.class_name: r for r in sheet.rows}
    assert (rows["ant"].severity, rows["ant"].occurrence_final, rows["ant"].detection) == (10, 7, 3)
    assert rows["ant"].rpn_final == 210 and rows["ant"].priority_final == "High"
    assert rows["eel"].severity == 9  # by class id
    assert rows["cat"].detection == 8 and rows["cat"].occurrence_final == 6 and rows["cat"].rpn_final == 5 * 6 * 8
    assert rows["bee"].occurrence_final == 10 and rows["bee"].occurrence_worst == 10
    assert rows["bee"].worst_error == pytest.approx(0.7) and rows["bee"].worst_iteration == 70
    assert rows["fox"].occurrence_worst == 9 and rows["dog"].occurrence_worst == 8
    for r in sheet.rows:
        assert r.rpn_worst == r.severity * r.occurrence_worst * r.detection
    # sorted: priority (worst) first, then RPN (worst)
    rank = {"High": 2, "Medium": 1, "Low": 0}
    keys = [(rank[r.priority_worst], r.rpn_worst) for r in sheet.rows]
    assert keys == sorted(keys, reverse=True)
    # ant High (RPN 210); then the Medium ones by RPN: cat 5·6·8, bee 5·10·3, fox 5·9·3, dog 5·8·3; eel Low
    assert [r.class_name for r in sheet.rows] == ["ant", "cat", "bee", "fox", "dog", "eel"]
    assert [r.priority_worst for r in sheet.rows] == ["High"] + ["Medium"] * 4 + ["Low"]


def test_final_and_worst_occurrence_differ_for_the_stability_gap(make_result):
    classes = [{"final_accuracy": 0.999, "final_correct": 999, "final_total": 1000,
                "min_after_learned": 0.9, "min_after_learned_iteration": 20}]
    row = build_worksheet([make_result(classes=classes)], FmecaConfig(default_severity=8)).rows[0]
    assert (row.occurrence_final, row.occurrence_worst) == (5, 10)  # 1 in 1,000 → 5; 1 in 10 → 10
    assert (row.priority_final, row.priority_worst) == ("Medium", "High")


def test_over_runs_worst_and_mean(make_result):
    runs = [make_result(classes=[{"final_accuracy": 0.9, "final_correct": 90, "final_total": 100}], seed=1),
            make_result(classes=[{"final_accuracy": 0.99, "final_correct": 99, "final_total": 100}], seed=2)]
    worst = build_worksheet(runs, FmecaConfig()).rows[0]
    mean = build_worksheet(runs, FmecaConfig(over_runs="mean")).rows[0]
    assert worst.final_error == pytest.approx(0.1) and worst.occurrence_final == 10 and worst.seed == 1
    assert mean.final_error == pytest.approx(0.055) and mean.occurrence_final == 9


def test_wilson_bound_rates_the_upper_error(make_result):
    classes = [{"final_accuracy": 1.0, "final_correct": 50, "final_total": 50, "final_lcb": 0.93}]
    point = build_worksheet([make_result(classes=classes)], FmecaConfig()).rows[0]
    upper = build_worksheet([make_result(classes=classes)], FmecaConfig(bound="wilson95")).rows[0]
    assert point.occurrence_final == 2 and upper.occurrence_final == 9  # 0 errors in 50 is not "never"


def test_criticality_matrix_counts(make_result):
    classes = [{"final_accuracy": 0.5}] * 3 + [{"final_accuracy": 0.99, "final_correct": 99, "final_total": 100}]
    sheet = build_worksheet([make_result(classes=classes)], FmecaConfig(severity={"ant": 10}))
    m = sheet.matrix
    assert m[0][9] == 1  # S 10, O 10: ant
    assert m[10 - 5][9] == 2  # S 5, O 10: bee, cat
    assert m[10 - 5][6] == 1  # S 5, O 7: dog
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
    classes = [{"final_accuracy": 0.0, "final_correct": 0, "final_total": 40, "min_after_learned": 0.0,
                "min_after_learned_iteration": 120}]
    row = build_worksheet([make_result(classes=classes)], FmecaConfig()).rows[0]
    assert row.final_error == row.worst_error == 1.0 and row.worst_iteration == 120
