"""From evaluation logs and a policy to a decision: compute the metrics, evaluate the rules, hash the
inputs."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

from clgate._version import __version__
from clgate.logfile import log_sha256
from clgate.metrics import compute_metrics, compute_runs
from clgate.metrics.arrays import LogArrays
from clgate.metrics.registry import plugin_registry
from clgate.policy.evaluate import evaluate_rules, verdict_of, worksheet_for
from clgate.policy.model import Policy
from clgate.schemas.decision import (
    Decision,
    Hashes,
    Headline,
    PooledClassResult,
    RuleResult,
    WorstClass,
    WorstMoment,
)
from clgate.schemas.evaluation_log import EvaluationLog
from clgate.schemas.metrics import MetricsResult, PooledClass, RunsResult
from clgate.schemas.notebook import decision_html
from clgate.schemas.policy import rule_label
from clgate.schemas.vocab import Verdict

LogLike: TypeAlias = EvaluationLog | LogArrays
"""A validated log, or one read straight into arrays by :func:`clgate.logfile.read_log`."""


@dataclass
class GateResult:
    """The gate's result: the decision, the metrics it was made from (what the reports draw), and the
    report files written (empty until :func:`clgate.gate.gate_logs` writes them)."""

    decision: Decision
    metrics: RunsResult | None = None
    baseline_metrics: MetricsResult | None = None
    files: dict[str, Path] = field(default_factory=dict)

    @property
    def verdict(self) -> Verdict:
        return self.decision.verdict

    @property
    def exit_code(self) -> int:
        """0 PASS/WARN, 1 FAIL, 2 ERROR (see :func:`clgate.schemas.vocab.exit_code` for ``fail_on_warn``)."""
        return self.decision.exit_code

    def _repr_html_(self) -> str:
        """Jupyter: the decision (verdict, worst class at its worst moment, rules), heatmaps."""
        return decision_html(self.decision, self.metrics)

    def to_frame(self) -> Any:
        """The rules as a pandas DataFrame (``.metrics.to_frame()`` for the metrics; needs pandas)."""
        return self.decision.to_frame()

    to_pandas = to_frame


Evaluation = GateResult
"""The former name of :class:`GateResult` (what :func:`evaluate` returns)."""


def log_hash(log: LogLike) -> str:
    """sha256 of the log's canonical JSON (the same log gives the same hash, whatever its file layout).

    Fields added later with a null default are left out while null, so a log hashes as it did before.
    A log read into arrays (:func:`clgate.logfile.read_log`) carries this hash, computed from its
    header and counts without a second pass through pydantic.
    """
    if not isinstance(log, EvaluationLog):
        if log.sha256 is not None:
            return log.sha256
        return log_sha256(log)
    unset = {"diverged"} if log.diverged is None else None
    return hashlib.sha256(log.model_dump_json(exclude=unset).encode("utf-8")).hexdigest()


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
                class_id=ev["class"],
                class_name=ev["class_name"],
                task=ev["task"],
                accuracy=ev["value"],
                iteration=ev.get("iteration"),
                seed=run.meta.get("seed", i),
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


def _mean(values: Sequence[float | None]) -> float | None:
    """The mean over runs; None when any run has none."""
    if not values or any(v is None for v in values):
        return None
    return sum(values) / len(values)  # type: ignore[arg-type]


def _summed(values: Sequence[int | None]) -> int | None:
    """The sum over runs; None when any run has none."""
    return None if any(v is None for v in values) else sum(values)  # type: ignore[arg-type]


def pooled_classes(runs: Sequence[MetricsResult]) -> list[PooledClassResult] | None:
    """NI/NIC logs: each real class pooled over its cells (accuracy the mean over runs, counts summed),
    with its worst cell; lowest accuracy first (then class id). None for an NC log."""
    if not runs or runs[0].pooled_classes is None:
        return None
    missing = PooledClass(id=-1, name="", cells=[], final_accuracy=None)
    pooled = [{p.id: p for p in run.pooled_classes or []} for run in runs]
    cells = [{c.name: c.final_accuracy for c in run.classes} for run in runs]
    out = []
    for first in runs[0].pooled_classes:
        found = [by_id.get(first.id, missing) for by_id in pooled]
        cell_means = [(_mean([by_name.get(name) for by_name in cells]), name) for name in first.cells]
        rated = [(acc, name) for acc, name in cell_means if acc is not None]
        worst = min(rated, key=lambda r: r[0]) if rated else None  # the first in cell order on a tie
        out.append(
            PooledClassResult(
                id=first.id,
                name=first.name,
                accuracy=_mean([p.final_accuracy for p in found]),
                correct=_summed([p.final_correct for p in found]),
                total=_summed([p.final_total for p in found]),
                cells=list(first.cells),
                worst_cell=None if worst is None else worst[1],
                worst_cell_accuracy=None if worst is None else worst[0],
            )
        )
    out.sort(key=lambda p: (p.accuracy is None, p.accuracy if p.accuracy is not None else 0.0, p.id))
    return out


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
        pooled_classes=pooled_classes(runs),
        plugins={mid: _last(m[mid]) for mid in plugin_registry() if mid in m},
    )


def _summary(
    verdict: str,
    results: Sequence[RuleResult],
    errors: Sequence[str],
    incomplete: Sequence[str] = (),
    diverged: Sequence[str] = (),
) -> str:
    if errors:
        return f"{verdict}: {errors[0]}"
    head = ""
    if diverged:
        head += f"diverged: {'; '.join(diverged)}; "
    if incomplete:
        head += f"partial input ({'; '.join(incomplete)}); "
    bad = [r for r in results if r.status in ("error", "fail", "warn")]
    order = {"error": 0, "fail": 1, "warn": 2}
    bad.sort(key=lambda r: (order[r.status], r.index))
    if not bad:
        return f"{verdict}: {head}all {len(results)} rule(s) pass"
    reasons = "; ".join(f"{r.id}: {r.message}" for r in bad[:3])
    more = f" (+{len(bad) - 3} more)" if len(bad) > 3 else ""
    return f"{verdict}: {head}{reasons}{more}"


def _who(log: LogLike, i: int, what: str = "logs") -> str:
    seed = log.meta.get("seed")
    return f"{what}[{i}]" + (f" (seed {seed})" if seed is not None else "")


def completeness(runs: Sequence[LogLike], baseline: LogLike | None = None) -> tuple[list[str], list[str]]:
    """(incomplete, diverged): one line per partial run (and baseline), one per diverged run."""
    incomplete: list[str] = []
    diverged: list[str] = []
    named = [(log, _who(log, i)) for i, log in enumerate(runs)]
    if baseline is not None:
        named.append(
            (baseline, "baseline" + (f" (seed {baseline.meta['seed']})" if "seed" in baseline.meta else ""))
        )
    for log, who in named:
        if log.finished_tasks < log.n_tasks:
            incomplete.append(f"{who}: {log.finished_tasks} of {log.n_tasks} tasks finished")
        if log.diverged is not None:
            d = log.diverged
            diverged.append(
                f"{who}: training diverged at task {d.task}, iteration {d.iteration} ({d.reason})"
            )
    return incomplete, diverged


def selection_problems(runs: Sequence[LogLike], baseline: LogLike | None) -> tuple[list[str], str | None]:
    """Runs or a baseline evaluated on different test samples cannot be compared.

    Returns (errors between the runs of one job, the baseline problem). Logs without a recorded
    selection (``meta.eval_selection.sha256``, written since clgate records it) are not compared.
    """

    def sel(log: LogLike) -> str | None:
        v = log.meta.get("eval_selection")
        return v.get("sha256") if isinstance(v, dict) and isinstance(v.get("sha256"), str) else None

    errors: list[str] = []
    ref = next(((i, h) for i, log in enumerate(runs) if (h := sel(log)) is not None), None)
    if ref is not None:
        for i, log in enumerate(runs):
            h = sel(log)
            if h is not None and h != ref[1]:
                errors.append(
                    f"{_who(log, i)}: evaluated on other test samples than {_who(runs[ref[0]], ref[0])} "
                    f"(meta.eval_selection.sha256 {h[:12]} ≠ {ref[1][:12]}); runs of one job must share them"
                )
    problem = None
    other = sel(baseline) if baseline is not None else None
    if ref is not None and other is not None and other != ref[1]:
        problem = (
            "baseline: evaluated on other test samples than the candidate "
            f"(meta.eval_selection.sha256 {other[:12]} ≠ {ref[1][:12]}); "
            "a comparison across different samples is refused"
        )
    return errors, problem


def evaluate(
    runs: Sequence[LogLike],
    policy: Policy,
    *,
    baseline: LogLike | None = None,
    provenance: dict | None = None,
) -> GateResult:
    """:func:`decide`, keeping the metrics results for the reports."""
    if not runs:
        raise ValueError("runs: at least one evaluation log is needed")
    common = _common_fields(runs, policy, baseline, provenance)
    errors, baseline_problem = selection_problems(runs, baseline)
    incomplete, diverged = completeness(runs, baseline)
    common["complete"] = not incomplete
    common["incomplete"] = incomplete
    common["diverged"] = diverged
    metrics, base_metrics, baseline_problem = _compute(runs, policy, baseline, errors, baseline_problem)
    if metrics is None:
        return GateResult(_invalid_logs_decision(policy, errors, common), None, None)

    sheet, sheet_problems = worksheet_for(policy, metrics.runs)
    errors.extend(sheet_problems)
    results = evaluate_rules(
        policy, metrics.runs, baseline=base_metrics, worksheet=sheet, baseline_problem=baseline_problem
    )
    verdict = verdict_of(results, errors, diverged, incomplete)
    decision = Decision(
        verdict=verdict,
        summary=_summary(verdict, results, errors, incomplete, diverged),
        rules=results,
        errors=errors,
        headline=headline(metrics),
        fmeca=sheet,
        **common,
    )
    return GateResult(decision, metrics, base_metrics)


def _common_fields(
    runs: Sequence[LogLike], policy: Policy, baseline: LogLike | None, provenance: dict | None
) -> dict[str, Any]:
    """The decision's fields that do not depend on the judging: policy, hashes, runs, provenance."""
    hashes = Hashes(
        logs=[log_hash(log) for log in runs],
        policy=policy_hash(policy),
        baseline=log_hash(baseline) if baseline is not None else None,
    )
    seeds = [log.meta.get("seed") for log in runs]
    strategies = {str(log.meta.get("strategy")) for log in runs if log.meta.get("strategy") is not None}
    return {
        "policy_name": policy.name,
        "policy_version": policy.version,
        "hashes": hashes,
        "clgate_version": __version__,
        "runs": len(runs),
        "seeds": seeds,
        "strategy": strategies.pop() if len(strategies) == 1 else None,
        "provenance": dict(provenance or {}),
    }


def _compute(
    runs: Sequence[LogLike],
    policy: Policy,
    baseline: LogLike | None,
    errors: list[str],
    baseline_problem: str | None,
) -> tuple[RunsResult | None, MetricsResult | None, str | None]:
    """(metrics of the runs, metrics of the baseline, the baseline problem). Invalid logs add to
    ``errors`` (no metrics); an invalid baseline becomes the baseline problem (the runs are still
    computed, without it)."""
    opts: dict[str, Any] = {"task_accuracy": policy.task_accuracy, "windows": policy.windows()}
    metrics: RunsResult | None = None
    base_metrics: MetricsResult | None = None
    try:
        metrics = compute_runs(list(runs), baseline=baseline, **opts)
    except ValueError as exc:
        if baseline is None:
            errors.append(f"logs: {exc}")
        else:
            baseline_problem = baseline_problem or f"baseline: {exc}"
            try:
                metrics = compute_runs(list(runs), **opts)
            except ValueError as exc2:
                errors.append(f"logs: {exc2}")
    if baseline is not None and baseline_problem is None:
        try:
            base_metrics = compute_metrics(baseline, **opts)
        except ValueError as exc:
            baseline_problem = baseline_problem or f"baseline: {exc}"
    return metrics, base_metrics, baseline_problem


def _invalid_logs_decision(policy: Policy, errors: list[str], common: dict[str, Any]) -> Decision:
    """ERROR: the logs could not be read into metrics; every rule is "not evaluated"."""
    results = [
        RuleResult(
            index=i,
            id=_label(policy, i),
            kind=rule.kind,
            severity=rule.severity,
            status="error",
            message="not evaluated: the logs are invalid",
        )
        for i, rule in enumerate(policy.rules)
    ]
    verdict = verdict_of(results, errors)
    return Decision(
        verdict=verdict,
        summary=_summary(verdict, results, errors),
        rules=results,
        errors=errors,
        **common,
    )


def _label(policy: Policy, i: int) -> str:
    return rule_label(policy.rules[i], i)


def decide(
    runs: Sequence[LogLike],
    policy: Policy,
    *,
    baseline: LogLike | None = None,
    provenance: dict | None = None,
) -> Decision:
    """The gate decision for one or more runs (seeds) of one job. Pure and deterministic.

    Verdict: ERROR if the inputs are invalid; FAIL if a run diverged; else ERROR if a rule cannot be
    evaluated (a partial input that does not already violate it included), else FAIL if a ``block``
    rule fails, else WARN if a ``warn`` rule fails, else PASS.
    """
    return evaluate(runs, policy, baseline=baseline, provenance=provenance).decision
