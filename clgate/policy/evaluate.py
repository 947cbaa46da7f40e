"""Evaluating a policy: rule results from metrics results, then the verdict.

Pure: metrics results and schema objects in, :class:`~clgate.schemas.decision.RuleResult` s and a
verdict out. Each rule is judged by the judge of its kind (:data:`clgate.policy.judges.JUDGES`; the
semantics of each kind are in its module there). Common to all:

- A ``floor`` passes when ``value >= floor``, a ``ceiling`` when ``value <= ceiling``; equality passes
  (within ``TOLERANCE``, so that 0.8 computed as 0.7999999999999999 still meets a floor of 0.8).
- A rule whose value cannot be computed (metric null, class unknown, no baseline …) has status
  ``error``; any error makes the verdict ERROR. Never a silent pass.
- Completeness: a task a run did not finish, a scalar of a partial run, a value null in one run but
  not in another are *missing*, never skipped. The values that exist are judged (a per-task value of
  a partial run is what the complete run has at that task; a partial run's lowest class accuracy so
  far bounds its lowest from above): a violation among them is a violation (``fail``). Otherwise the
  rule is ``error`` ("incomplete input", evidence ``incomplete`` names each run and task missing).
  Rules on final values of partial runs (``class at: final``, baselines, FMECA, ``over_runs: mean``)
  cannot be bounded: ``error``.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from clgate.fmeca import build_worksheet, unknown_rated_classes
from clgate.metrics.plugins import checked_evidence, plugin_code, raised
from clgate.policy.judges import (
    JUDGES,
    TOLERANCE,
    IncompleteInput,
    Inputs,
    Judged,
    RuleError,
    describe_missing,
)
from clgate.policy.plugins import judged_problem, names_problem, rule_kinds, validate_rule
from clgate.schemas.decision import RuleResult, RuleStatus
from clgate.schemas.fmeca import FmecaWorksheet
from clgate.schemas.metrics import MetricsResult
from clgate.schemas.policy import rule_label
from clgate.schemas.vocab import Verdict

__all__ = [
    "TOLERANCE",
    "IncompleteInput",
    "RuleError",
    "describe_missing",
    "evaluate_rules",
    "verdict_of",
    "worksheet_for",
]


def evaluate_rules(
    policy: Any,
    runs: Sequence[MetricsResult],
    *,
    baseline: MetricsResult | None = None,
    worksheet: FmecaWorksheet | None = None,
    baseline_problem: str | None = None,
) -> list[RuleResult]:
    """One :class:`RuleResult` per rule of ``policy`` (a validated :class:`clgate.policy.Policy`)."""
    inputs = Inputs(baseline=baseline, worksheet=worksheet, baseline_problem=baseline_problem)
    return [_rule_result(rule, i, runs, inputs) for i, rule in enumerate(policy.rules)]


def _rule_result(rule: Any, i: int, runs: Sequence[MetricsResult], inputs: Inputs) -> RuleResult:
    """The judge of the rule's kind, its answer (or its error) as a :class:`RuleResult`."""
    if rule.kind not in JUDGES:
        return _plugin_rule_result(rule, i, runs, inputs)
    judge = JUDGES[rule.kind]
    base = {
        "index": i,
        "id": rule_label(rule, i),
        "kind": rule.kind,
        "metric": judge.subject(rule),
        "severity": rule.severity,
    }
    try:
        judged: Judged = judge.judge(rule, runs, inputs)
    except RuleError as exc:
        return _error_result(base, exc)
    return _judged_result(base, rule.severity, judged)


def _error_result(base: dict[str, Any], exc: RuleError) -> RuleResult:
    extra: dict[str, Any] = (
        {"evidence": {"incomplete": exc.missing}} if isinstance(exc, IncompleteInput) else {}
    )
    return RuleResult(**base, status="error", passed=None, message=f"cannot evaluate: {exc}", **extra)


def _judged_result(base: dict[str, Any], severity: str, judged: Judged) -> RuleResult:
    passed = judged.margin >= -TOLERANCE
    status: RuleStatus = "pass" if passed else ("fail" if severity == "block" else "warn")
    return RuleResult(
        **base,
        value=judged.value,
        threshold=judged.threshold,
        comparison=judged.comparison,  # type: ignore[arg-type]
        margin=judged.margin,
        passed=passed,
        status=status,
        message=judged.message,
        evidence=judged.evidence,
    )


def _plugin_rule_result(rule: Any, i: int, runs: Sequence[MetricsResult], inputs: Inputs) -> RuleResult:
    """A rule of a plug-in kind: judged like a built-in; a broken plug-in, a judge that raises anything but
    :class:`RuleError` or answers with no finite value (or a margin that contradicts it) gives ``error``,
    naming the plug-in. The judge reads its own copies of the runs and inputs: what it writes into them
    changes no other rule's value, and no report's."""
    found = rule_kinds().kinds.get(rule.kind)
    base: dict[str, Any] = {"index": i, "id": rule.id or rule_label(rule, i), "kind": rule.kind}
    base["severity"] = rule.severity
    if found is None or found.judge is None:
        why = "no installed plug-in provides it" if found is None else f"{found.origin}: {found.problem}"
        return _error_result(base, RuleError(f"plug-in rule kind {rule.kind!r} is broken ({why})"))
    judge = found.judge
    named = f"plug-in rule kind {rule.kind!r} ({found.origin})"
    try:
        with plugin_code():
            model = validate_rule(judge, rule)
            label = judge.label(model) if judge.label else rule_label(rule, i)
            subject = judge.subject(model)
            problem = names_problem(label, subject)
            if problem is None:
                base["id"], base["metric"] = rule.id or label, subject
                judged = judge.judge(model, *copy.deepcopy((list(runs), inputs)))
    except RuleError as exc:
        return _error_result(base, exc)
    except Exception as exc:  # the plug-in's failure, named; never a pass
        return _error_result(base, RuleError(f"{named} raised {raised(exc)}"))
    problem = problem or judged_problem(judged)
    evidence = None
    if problem is None:
        problem, evidence = checked_evidence(judged.evidence, None)
    if problem:
        return _error_result(base, RuleError(f"{named} {problem}"))
    judged.evidence = evidence or {}
    return _judged_result(base, rule.severity, judged)


def verdict_of(
    results: Sequence[RuleResult],
    errors: Sequence[str] = (),
    diverged: Sequence[str] = (),
    incomplete: Sequence[str] = (),
) -> Verdict:
    """ERROR over FAIL over WARN over PASS; a diverged run is FAIL whatever its rules say (it cannot
    pass, and "could not judge" would hide that the candidate blew up), unless the inputs are invalid.
    Incomplete input (a partial run or baseline) never passes: a violation seen in it is FAIL, anything
    else is ERROR — even when every rule only looked at the finished tasks, the release would rest on a
    run nobody saw to its end.

    >>> verdict_of([]), verdict_of([], ["bad log"]), verdict_of([], diverged=["seed 1: loss nan"])
    ('PASS', 'ERROR', 'FAIL')
    >>> verdict_of([], incomplete=["seed 0: 2 of 5 tasks finished"])
    'ERROR'
    """
    statuses = {r.status for r in results}
    if errors:
        return "ERROR"
    if diverged:
        return "FAIL"
    if "error" in statuses:
        return "ERROR"
    if "fail" in statuses:
        return "FAIL"
    if incomplete:
        return "ERROR"
    if "warn" in statuses:
        return "WARN"
    return "PASS"


def worksheet_for(policy: Any, runs: Sequence[MetricsResult]) -> tuple[FmecaWorksheet | None, list[str]]:
    """The FMECA worksheet and configuration problems (ratings for classes that do not exist)."""
    if not runs or not runs[0].classes:
        return None, []
    return build_worksheet(runs, policy.fmeca), unknown_rated_classes(policy.fmeca, runs[0].classes)
