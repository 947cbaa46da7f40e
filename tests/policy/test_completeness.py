"""Issue 9: the gate never passes what it did not see (partial logs and seeds, divergence, two-sided
rules over seeds, different evaluation samples)."""

from __future__ import annotations

from typing import Any

from clgate.policy import decide, parse_policy
from clgate.schemas.evaluation_log import EvaluationLog

CANCELLED_POLICY = {
    "name": "issue9",
    "rules": [
        {"metric": "acc", "at": "worst", "floor": 0.5},
        {"metric": "mica", "at": "all", "floor": 0.5},
        {"metric": "wamica", "floor": 0.4},
        {"metric": "wc_acc", "floor": 0.4},
    ],
}


def _log(
    per_task: list[float],
    *,
    n_tasks: int | None = None,
    seed: int = 0,
    meta: dict[str, Any] | None = None,
    **extra: Any,
) -> EvaluationLog:
    """One class per task; task k's end evaluates classes 1 … k at accuracy ``per_task[k]`` (of 10).

    ``n_tasks`` larger than ``len(per_task)`` makes a partial log (the later tasks never finished).
    """
    K = n_tasks or len(per_task)
    points = []
    for k, a in enumerate(per_task):
        seen = k + 1
        points.append(
            {
                "iteration": 10 * (k + 1),
                "task": k + 1,
                "task_end": True,
                "correct": [round(a * 10) if c < seen else 0 for c in range(K)],
                "total": [10 if c < seen else 0 for c in range(K)],
            }
        )
    doc: dict[str, Any] = {
        "tasks": [[c] for c in range(K)],
        "points": points,
        "meta": {"seed": seed, **(meta or {})},
        "partial": len(per_task) < K,
        **extra,
    }
    return EvaluationLog.model_validate(doc)


def test_a_cancelled_run_alone_never_passes_and_says_it_is_partial():
    log = _log([1.0, 1.0], n_tasks=5)
    d = decide([log], parse_policy(CANCELLED_POLICY))
    assert d.verdict == "ERROR"
    assert not d.complete and d.incomplete == ["logs[0] (seed 0): 2 of 5 tasks finished"]
    assert "partial input" in d.summary
    for r in d.rules:
        assert r.status == "error" and "incomplete input" in r.message, r
        assert r.evidence["incomplete"][0]["seed"] == 0
    assert d.rules[0].evidence["incomplete"][0]["tasks"] == [3, 4, 5]


def test_a_partial_seed_does_not_hide_a_failing_run():
    failing = _log([1.0, 1.0, 0.2, 0.9, 0.9], seed=1)
    partial = _log([1.0, 1.0], n_tasks=5, seed=2)
    policy = parse_policy({"name": "p", "rules": [{"metric": "acc", "at": "worst", "floor": 0.5}]})
    assert decide([failing], policy).verdict == "FAIL"
    d = decide([failing, partial], policy)
    assert d.verdict == "FAIL"  # the violation seen is a violation whatever is missing
    rule = d.rules[0]
    assert rule.status == "fail" and rule.evidence["seed"] == 1 and rule.evidence["task"] == 3
    assert rule.evidence["incomplete"][0]["seed"] == 2 and "input incomplete" in rule.message
    assert not d.complete and "partial input" in d.summary


def test_a_partial_seed_of_a_passing_run_is_an_error_not_a_pass():
    good = _log([1.0, 0.9, 0.9], seed=1)
    policy = parse_policy(
        {
            "name": "p",
            "rules": [
                {"metric": "acc", "at": "worst", "floor": 0.5},
                {
                    "metric": "acc",
                    "at": "task:2",
                    "floor": 0.5,
                },  # both seeds finished task 2: judged normally
                {"classes": "*", "at": "min_after_learned", "floor": 0.5},
                {"classes": "*", "floor": 0.5},
            ],
        }
    )
    assert decide([good], policy).verdict == "PASS"
    d = decide([good, _log([1.0, 1.0], n_tasks=3, seed=2)], policy)
    assert d.verdict == "ERROR"
    assert [r.status for r in d.rules] == ["error", "pass", "error", "error"]


def test_two_sided_rule_judges_each_side_on_its_own_worst_run():
    low, high = _log([0.7], seed=1), _log([1.0], seed=2)
    policy = parse_policy({"name": "p", "rules": [{"metric": "acc", "floor": 0.5, "ceiling": 0.95}]})
    d = decide([low, high], policy)
    assert d.verdict == "FAIL"
    ev = d.rules[0].evidence
    assert ev["ceiling"]["seed"] == 2 and ev["ceiling"]["value"] == 1.0 and ev["ceiling"]["margin"] < 0
    assert ev["floor"]["seed"] == 1 and ev["floor"]["value"] == 0.7 and ev["floor"]["margin"] > 0
    assert ev["seed"] == 2 and d.rules[0].comparison == "<="


def test_a_diverged_run_fails_and_the_decision_says_where():
    log = _log([1.0, 1.0], n_tasks=3, diverged={"task": 3, "iteration": 25, "reason": "loss is nan"})
    policy = parse_policy({"name": "p", "rules": [{"metric": "acc", "at": "task:1", "floor": 0.5}]})
    d = decide([log], policy)
    assert d.verdict == "FAIL" and d.rules[0].status == "pass"
    assert d.diverged == ["logs[0] (seed 0): training diverged at task 3, iteration 25 (loss is nan)"]
    assert "diverged" in d.summary


def test_runs_or_a_baseline_on_other_test_samples_are_refused():
    a = _log([1.0, 1.0], meta={"eval_selection": {"sha256": "a" * 64}})
    b = _log([1.0, 1.0], seed=1, meta={"eval_selection": {"sha256": "b" * 64}})
    policy = parse_policy(
        {
            "name": "p",
            "rules": [
                {"metric": "acc", "floor": 0.5},
                {"baseline": "acc", "max_drop": 0.1},
            ],
        }
    )
    d = decide([a], policy, baseline=b)
    assert d.verdict == "ERROR" and d.rules[0].status == "pass"
    assert d.rules[1].status == "error" and "other test samples" in d.rules[1].message
    d = decide([a, b], policy)
    assert d.verdict == "ERROR" and "other test samples" in d.errors[0]
    same = _log([0.95, 0.95], seed=3, meta={"eval_selection": {"sha256": "a" * 64}})
    assert decide([a], policy, baseline=same).verdict == "PASS"
