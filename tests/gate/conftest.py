"""Builders for the gate tests: evaluation logs, metrics results and policies written by hand."""

from __future__ import annotations

from typing import Any

import pytest

from schemas.evaluation_log import EvaluationLog
from schemas.metrics import ClassStats, MetricsResult

NAMES = ["ant", "bee", "cat", "dog", "eel", "fox"]


def _build_log(
    points: list[tuple[int, bool, list[float | None]]],
    *,
    tasks: list[list[int]] | None = None,
    names: list[str] | None = None,
    seed: Any = 0,
    total: int = 100,
    strategy: str = "test",
) -> EvaluationLog:
    """``points``: (task, task_end, class accuracies with None = not evaluated); counts out of ``total``."""
    tasks = tasks or [[0, 1], [2, 3], [4, 5]]
    n = sum(len(t) for t in tasks)
    names = names if names is not None else NAMES[:n]
    pts = []
    for i, (task, end, accs) in enumerate(points):
        pts.append({
            "iteration": 10 * (i + 1), "task": task, "task_end": end,
            "correct": [0 if a is None else round(a * total) for a in accs],
            "total": [0 if a is None else total for a in accs],
        })
    return EvaluationLog.model_validate(
        {"class_names": names, "tasks": tasks, "points": pts, "meta": {"seed": seed, "strategy": strategy}}
    )


def _good(seed: Any = 0, level: float = 0.9) -> EvaluationLog:
    """3 tasks of 2 classes; every class stays at ``level`` (a small dip mid-task)."""
    L, d = level, level - 0.05
    return _build_log([
        (1, False, [0.8, 0.8, None, None, None, None]),
        (1, True, [L, L, None, None, None, None]),
        (2, False, [d, L, 0.7, 0.7, None, None]),
        (2, True, [L, L, L, L, None, None]),
        (3, False, [L, d, L, L, 0.7, 0.7]),
        (3, True, [L, L, L, L, L, L]),
    ], seed=seed)


def _forgetful(seed: Any = 0) -> EvaluationLog:
    """Like ``_good`` but class 0 ('ant') collapses to 0.2 during task 2 and ends at 0.5."""
    return _build_log([
        (1, False, [0.8, 0.8, None, None, None, None]),
        (1, True, [0.9, 0.9, None, None, None, None]),
        (2, False, [0.2, 0.85, 0.7, 0.7, None, None]),
        (2, True, [0.6, 0.9, 0.9, 0.9, None, None]),
        (3, False, [0.4, 0.85, 0.9, 0.9, 0.7, 0.7]),
        (3, True, [0.5, 0.9, 0.9, 0.9, 0.9, 0.9]),
    ], seed=seed)


def _result(
    metrics: dict[str, Any] | None = None,
    *,
    classes: list[dict[str, Any]] | None = None,
    seed: Any = 0,
    n_tasks: int = 3,
    reasons: dict[str, str] | None = None,
) -> MetricsResult:
    """A MetricsResult written by hand (the rule engine reads nothing else)."""
    stats = []
    for i, c in enumerate(classes or []):
        base = {"id": i, "name": NAMES[i], "task": i // 2 + 1, "final_accuracy": 0.9}
        base.update(c)
        stats.append(ClassStats(**base))
    return MetricsResult(
        metrics=metrics or {}, reasons=reasons or {}, n_tasks=n_tasks, n_classes=len(stats),
        finished_tasks=n_tasks, classes=stats, meta={"seed": seed},
    )


@pytest.fixture
def build_log():
    return _build_log


@pytest.fixture
def good_log():
    return _good


@pytest.fixture
def forgetful_log():
    return _forgetful


@pytest.fixture
def make_result():
    return _result


@pytest.fixture
def policy_of():
    """``policy_of(rule, ...)`` → a validated Policy with those rules (dicts)."""
    from clgate.policy import parse_policy

    def make(*rules: dict[str, Any], **extra: Any):
        return parse_policy({"name": "test", "version": "1", "rules": list(rules), **extra})

    return make


@pytest.fixture
def judge(policy_of):
    """``judge(rule, runs, baseline=None)`` → the RuleResult of one rule on hand-built metrics."""
    from clgate.policy import evaluate_rules
    from clgate.policy.evaluate import worksheet_for

    def run(rule: dict[str, Any], runs: list[MetricsResult], baseline: MetricsResult | None = None, **extra: Any):
        policy = policy_of(rule, **extra)
        sheet, _ = worksheet_for(policy, runs)
        return evaluate_rules(policy, runs, baseline=baseline, worksheet=sheet)[0]

    return run
