"""From evaluation logs and a policy to a decision: compute the metrics, evaluate the rules, hash the inputs."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from clgate import __version__
from clgate.policy.evaluate import evaluate_rules, verdict_of, worksheet_for
from clgate.policy.model import Policy
from clgate.schemas.decision import Decision, Hashes, Headline, RuleResult, WorstClass, WorstMoment
from clgate.schemas.evaluation_log import EvaluationLog
from clgate.schemas.metrics import MetricsResult, RunsResult


@dataclass
class Evaluation:
    """A decision with the metrics it was made from (what the reports draw)."""

    decision: Decision
    metrics: RunsResult | None
    baseline_metrics: MetricsResult | None


def log_hash(log: EvaluationLog) -> str:
    """sha256 of the log's canonical JSON (the same log gives the same hash, whatever its file layout)."""
    return hashlib.sha256(log.model_dump_json().encode("utf-8")).hexdigest()


def policy_hash(policy: Policy) -> str:
    return hashlib.sha256(policy.canonical_json().encode("utf-8")).hexdigest()


def _last(v: Any) -> float | None:
    if isinstance(v, list):
        return v[-1] if v else None
    return v


def worst_moment(runs: Sequence[MetricsResult]) -> WorstMoment | None:
    """The lowest accuracy any old class fell to after it was learned, over all runs: the evidence of
    each run's last ``min_class_acc`` (first run wins ties)."""
    best: WorstMoment | None = None
    for i, run in enumerate(runs):
        evidence = run.evidence.get("min_class_acc")
        found = [e for e in evidence if isinstance(e, dict)] if isinstance(evidence, list) else []
        ev = found[-1] if found else None  # the last task end that has one (a partial log stops early)
        if not isinstance(ev, dict) or "value" not in ev:
            continue
        if best is None or ev["value"] < best.accuracy:
            best = WorstMoment(
                class_id=ev["class"], class_name=ev["class_name"], task=ev["task"], accuracy=ev["value"],
                iteration=ev.get("iteration"), seed=run.meta.get("seed", i),
            )
    return best


def _regressed_class(runs: Sequence[MetricsResult]) -> str | None:
    """Name of the class with the largest drop against the baseline, over the runs."""
    found = []
    for run in runs:
        ev = run.evidence.get("class_regression")
        value = run.metrics.get("class_regression")
        if isinstance(ev, dict) and "class_name" in ev and isinstance(value, (int, float)):
            found.append((float(value), str(ev["class_name"])))
    return max(found, key=lambda f: f[0])[1] if found else None


def headline(metrics: RunsResult, worst: int = 5) -> Headline:
    """Final values (mean over runs) and the classes with the lowest mean final accuracy."""
    m = metrics.metrics
    runs = metrics.runs
    worst_classes: list[WorstClass] = []
    if runs and runs[0].classes:
        per_class = []
        for c, stats in enumerate(runs[0].classes):
            vals = [r.classes[c].final_accuracy for r in runs]
            acc = None if any(v is None for v in vals) else sum(vals) / len(vals)  # type: ignore[arg-type]
            per_class.append((acc, stats))
        per_class.sort(key=lambda p: (p[0] is None, p[0] if p[0] is not None else 0.0, p[1].id))
        worst_classes = [WorstClass(id=s.id, name=s.name, accuracy=a) for a, s in per_class[:worst]]
    return Headline(
        acc=_last(m.get("acc")),
        mica=_last(m.get("mica")),
        wamica=_last(m.get("wamica")),
        min_acc=_last(m.get("min_acc")),
        min_class_acc=_last(m.get("min_class_acc")),
        worst_moment=worst_moment(runs),
        wc_acc=_last(m.get("wc_acc")),
        class_regression=_last(m.get("class_regression")),
        class_regression_class=_regressed_class(runs),
        worst_classes=worst_classes,
    )


def _summary(verdict: str, results: Sequence[RuleResult], errors: Sequence[str]) -> str:
    if errors:
        return f"{verdict}: {errors[0]}"
    bad = [r for r in results if r.status in ("error", "fail", "warn")]
    order = {"error": 0, "fail": 1, "warn": 2}
    bad.sort(key=lambda r: (order[r.status], r.index))
    if not bad:
        return f"{verdict}: all {len(results)} rule(s) pass"
    reasons = "; ".join(f"{r.id}: {r.message}" for r in bad[:3])
    more = f" (+{len(bad) - 3} more)" if len(bad) > 3 else ""
    return f"{verdict}: {reasons}{more}"


def evaluate(
    runs: Sequence[EvaluationLog],
    policy: Policy,
    *,
    baseline: EvaluationLog | None = None,
    provenance: dict | None = None,
) -> Evaluation:
    """:func:`decide`, keeping the metrics results for the reports."""
    from clgate.metrics import compute_metrics, compute_runs

    if not runs:
        raise ValueError("runs: at least one evaluation log is needed")
    opts: dict[str, Any] = {"task_accuracy": policy.task_accuracy, "windows": policy.windows()}
    hashes = Hashes(
        logs=[log_hash(log) for log in runs],
        policy=policy_hash(policy),
        baseline=log_hash(baseline) if baseline is not None else None,
    )
    seeds = [log.meta.get("seed") for log in runs]
    strategies = {str(log.meta.get("strategy")) for log in runs if log.meta.get("strategy") is not None}
    common: dict[str, Any] = {
        "policy_name": policy.name,
        "policy_version": policy.version,
        "hashes": hashes,
        "clgate_version": __version__,
        "runs": len(runs),
        "seeds": seeds,
        "strategy": strategies.pop() if len(strategies) == 1 else None,
        "provenance": dict(provenance or {}),
    }

    errors: list[str] = []
    baseline_problem: str | None = None
    metrics: RunsResult | None = None
    base_metrics: MetricsResult | None = None
    try:
        metrics = compute_runs(list(runs), baseline=baseline, **opts)
    except ValueError as exc:
        if baseline is None:
            errors.append(f"logs: {exc}")
        else:
            baseline_problem = f"baseline: {exc}"
            try:
                metrics = compute_runs(list(runs), **opts)
            except ValueError as exc2:
                errors.append(f"logs: {exc2}")
    if baseline is not None and baseline_problem is None:
        try:
            base_metrics = compute_metrics(baseline, **opts)
        except ValueError as exc:
            baseline_problem = f"baseline: {exc}"

    if metrics is None:
        results = [
            RuleResult(
                index=i, id=_label(policy, i), kind=rule.kind, severity=rule.severity,
                status="error", message="not evaluated: the logs are invalid",
            )
            for i, rule in enumerate(policy.rules)
        ]
        verdict = verdict_of(results, errors)
        decision = Decision(verdict=verdict, summary=_summary(verdict, results, errors), rules=results,
                            errors=errors, **common)
        return Evaluation(decision, None, None)

    sheet, sheet_problems = worksheet_for(policy, metrics.runs)
    errors.extend(sheet_problems)
    results = evaluate_rules(
        policy, metrics.runs, baseline=base_metrics, worksheet=sheet, baseline_problem=baseline_problem
    )
    verdict = verdict_of(results, errors)
    decision = Decision(
        verdict=verdict,
        summary=_summary(verdict, results, errors),
        rules=results,
        errors=errors,
        headline=headline(metrics),
        fmeca=sheet,
        **common,
    )
    return Evaluation(decision, metrics, base_metrics)


def _label(policy: Policy, i: int) -> str:
    from clgate.schemas.policy import rule_label

    return rule_label(policy.rules[i], i)


def decide(
    runs: Sequence[EvaluationLog],
    policy: Policy,
    *,
    baseline: EvaluationLog | None = None,
    provenance: dict | None = None,
) -> Decision:
    """The gate decision for one or more runs (seeds) of one job. Pure and deterministic.

    Verdict: ERROR if a rule cannot be evaluated or the inputs are inconsistent, else FAIL if a
    ``block`` rule fails, else WARN if a ``warn`` rule fails, else PASS.
    """
    return evaluate(runs, policy, baseline=baseline, provenance=provenance).decision
