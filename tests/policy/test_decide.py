"""Decisions on evaluation logs built so that the verdict is known, through the real metrics."""

from __future__ import annotations

import pytest

from clgate.policy import decide, evaluate, log_hash

POLICY = [
    {"metric": "acc", "floor": 0.8},
    {"metric": "mica", "at": "worst", "floor": 0.7},
    {"metric": "min_class_acc", "floor": 0.5},
    {"classes": "*", "at": "min_after_learned", "floor": 0.5},
]


def test_good_log_passes(good_log, policy_of):
    d = decide([good_log()], policy_of(*POLICY))
    assert d.verdict == "PASS", d.summary
    assert [r.status for r in d.rules] == ["pass"] * 4
    assert d.headline.acc == pytest.approx(0.9)
    assert d.headline.mica == pytest.approx(0.9)
    assert d.headline.min_class_acc == pytest.approx(0.85)  # the mid-task dips


def test_forgetful_log_fails_with_evidence(forgetful_log, policy_of):
    d = decide([forgetful_log(seed=7)], policy_of(*POLICY))
    assert d.verdict == "FAIL"
    status = {r.index: r for r in d.rules}
    assert status[0].status == "pass"  # the average hides the forgotten class: acc = 0.8333
    assert status[1].status == "fail" and status[1].value == pytest.approx(0.5)
    assert status[1].evidence["task"] == 3 and status[1].evidence["detail"]["class_name"] == "ant"
    # worst class at its worst moment: ant at 0.2, during task 2 (iteration 30)
    assert status[2].value == pytest.approx(0.2) and status[2].status == "fail"
    assert status[3].evidence["class_name"] == "ant" and status[3].evidence["iteration"] == 30
    assert status[3].evidence["seed"] == 7
    assert d.headline.worst_classes[0].name == "ant"
    assert d.fmeca is not None and d.fmeca.rows[0].class_name == "ant"


def test_warn_only_failures_give_warn(forgetful_log, policy_of):
    d = decide(
        [forgetful_log()],
        policy_of({"metric": "acc", "floor": 0.8}, {"metric": "mica", "floor": 0.7, "severity": "warn"}),
    )
    assert d.verdict == "WARN"


def test_seeds_worst_run_decides(good_log, forgetful_log, policy_of):
    policy = policy_of({"metric": "mica", "floor": 0.7})
    logs = [good_log(seed=0), forgetful_log(seed=1)]
    d = decide(logs, policy)
    assert d.verdict == "FAIL" and d.rules[0].evidence["seed"] == 1
    assert d.runs == 2 and d.seeds == [0, 1]
    mean = decide(logs, policy_of({"metric": "mica", "floor": 0.7, "over_runs": "mean"}))
    assert mean.verdict == "PASS" and mean.rules[0].value == pytest.approx(
        0.7
    )  # (0.9 + 0.5) / 2, at the floor


def test_baseline_regression(good_log, forgetful_log, policy_of):
    policy = policy_of({"baseline": "classes", "max_drop": 0.1}, {"baseline": "mica", "max_drop": 0.3})
    d = decide([forgetful_log()], policy, baseline=good_log())
    assert d.verdict == "FAIL"
    assert d.rules[0].value == pytest.approx(0.4) and d.rules[0].evidence["class_name"] == "ant"
    assert d.rules[1].status == "fail" and d.rules[1].value == pytest.approx(0.4)
    assert d.headline.class_regression == pytest.approx(0.4) and d.headline.class_regression_class == "ant"
    assert d.hashes.baseline == log_hash(good_log())


def test_baseline_over_other_classes_is_an_error_of_the_baseline_rules(good_log, build_log, policy_of):
    other = build_log([(1, True, [0.9, 0.9])], tasks=[[0, 1]], names=["x", "y"])
    policy = policy_of({"metric": "acc", "floor": 0.5}, {"baseline": "classes", "max_drop": 0.1})
    d = decide([good_log()], policy, baseline=other)
    assert d.verdict == "ERROR"
    assert d.rules[0].status == "pass"
    assert d.rules[1].status == "error" and d.rules[1].message.startswith("cannot evaluate: baseline:")


def test_runs_of_different_jobs_are_an_error(good_log, build_log, policy_of):
    other = build_log([(1, True, [0.9, 0.9])], tasks=[[0, 1]], names=["x", "y"])
    d = decide([good_log(), other], policy_of({"metric": "acc", "floor": 0.5}))
    assert d.verdict == "ERROR" and d.errors and d.errors[0].startswith("logs:")
    assert d.rules[0].status == "error"


def test_task_end_only_log_still_decides(build_log, policy_of):
    log = build_log(
        [
            (1, True, [0.9, 0.9, None, None, None, None]),
            (2, True, [0.8, 0.9, 0.9, 0.9, None, None]),
            (3, True, [0.7, 0.9, 0.9, 0.9, 0.9, 0.9]),
        ]
    )
    d = decide([log], policy_of({"metric": "mica", "floor": 0.7}, {"metric": "min_acc", "floor": 0.7}))
    assert d.verdict == "PASS", d.summary


def test_decision_is_deterministic_and_hashes_inputs(forgetful_log, policy_of):
    policy = policy_of(*POLICY)
    a = decide([forgetful_log()], policy, provenance={"run": "x"})
    b = decide([forgetful_log()], policy_of(*POLICY), provenance={"run": "x"})
    assert a.model_dump_json() == b.model_dump_json()
    assert a.hashes.logs == [log_hash(forgetful_log())] and len(a.hashes.policy) == 64
    changed = decide([forgetful_log()], policy_of(*POLICY[:3]))
    assert changed.hashes.policy != a.hashes.policy
    assert a.clgate_version and a.provenance == {"run": "x"}


def test_evaluate_keeps_the_metrics(good_log, policy_of):
    ev = evaluate([good_log()], policy_of({"metric": "wf7", "ceiling": 0.5}))
    assert ev.metrics is not None and "wf7" in ev.metrics.metrics
    assert ev.decision.rules[0].status == "pass"
