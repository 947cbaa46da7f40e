"""Baseline rules: the largest allowed drop against a baseline run (``{baseline: mica, max_drop: 0.1}``),
of a metric at one task or of any class's final accuracy (``baseline: classes``).

The drop is ``baseline - candidate`` for a metric where higher is better (the other way round
otherwise), divided by the baseline value with ``relative: true``. Baselines judge final values: every
run and the baseline must be complete.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clgate.fmt import fmt_short
from clgate.metrics import metric_info
from clgate.policy.judges.base import (
    TOLERANCE,
    Inputs,
    Judge,
    Judged,
    RuleError,
    metric_series,
    null_reason,
    require_complete,
    seed_of,
)
from clgate.schemas.metrics import MetricsResult
from clgate.schemas.policy import BaselineRule, parse_at


def _combine(
    runs: Sequence[MetricsResult], metric: str, over_runs: str, lower_is_worse: bool
) -> tuple[list[float | None], list[int | None], bool]:
    """Per task: the value over runs and the run that gave it (None for mean)."""
    series = [metric_series(r, metric) for r in runs]
    per_task = series[0][1]
    width = max(len(s[0]) for s in series)
    values: list[float | None] = []
    which: list[int | None] = []
    for k in range(width):
        col = [s[0][k] if k < len(s[0]) else None for s in series]
        if any(v is None for v in col):
            values.append(None)
            which.append(None)
        elif over_runs == "mean":
            values.append(sum(col) / len(col))  # type: ignore[arg-type]
            which.append(None)
        else:
            pick = min if lower_is_worse else max
            j = pick(range(len(col)), key=lambda i: (col[i], i) if lower_is_worse else (col[i], -i))
            values.append(col[j])
            which.append(j)
    return values, which, per_task


# (drop, the run judged or None for the mean, evidence, what dropped)
_Drop = tuple[float, int | None, dict[str, Any], str]


def _class_drop(rule: BaselineRule, runs: Sequence[MetricsResult], base: MetricsResult) -> _Drop:
    """The largest drop of any class's final accuracy."""
    if len(base.classes) != len(runs[0].classes) or any(
        a.name != b.name for a, b in zip(base.classes, runs[0].classes, strict=True)
    ):
        raise RuleError("the baseline's classes differ from the candidate's")
    drops = []
    for c, b in enumerate(base.classes):
        finals = [r.classes[c].final_accuracy for r in runs]
        cand = [v for v in finals if v is not None]
        if b.final_accuracy is None or len(cand) < len(finals):
            raise RuleError(f"class {b.name!r}: final accuracy unknown in the candidate or the baseline")
        run: int | None
        if rule.over_runs == "mean":
            v, run = sum(cand) / len(cand), None
        else:
            run = min(range(len(cand)), key=lambda i: (cand[i], i))
            v = cand[run]
        drop = b.final_accuracy - v
        if rule.relative:
            if b.final_accuracy == 0:
                drop = 0.0  # nothing to lose: a class at 0 in the baseline cannot drop
            else:
                drop = drop / b.final_accuracy
        drops.append((drop, c, run, b.final_accuracy, v))
    drop, c, run, b_val, c_val = max(drops, key=lambda d: (d[0], -d[1]))
    name = base.classes[c].name
    evidence: dict[str, Any] = {"class": c, "class_name": name, "baseline": b_val, "candidate": c_val}
    return drop, run, evidence, f"class {name!r}"


def _metric_drop(
    rule: BaselineRule, runs: Sequence[MetricsResult], base: MetricsResult, higher_is_better: bool
) -> _Drop:
    """The drop of a metric at the rule's task (``final`` or ``task:N``)."""
    metric = rule.baseline
    at, n = parse_at(rule.at)
    vals, which, per_task = _combine(runs, metric, rule.over_runs, higher_is_better)
    bvals, _, _ = _combine([base], metric, "mean", higher_is_better)
    k = (len(vals) - 1) if at == "final" or not per_task else (n or 1) - 1
    if k >= len(vals):
        raise RuleError(f"task:{n} does not exist (the log has {len(vals)} tasks)")
    c_val, b_val = vals[k], bvals[k] if k < len(bvals) else None
    if c_val is None or b_val is None:
        who = "candidate" if c_val is None else "baseline"
        reason = null_reason(runs if c_val is None else [base], metric)
        raise RuleError(f"{metric} is null in the {who}: {reason}")
    drop = (b_val - c_val) if higher_is_better else (c_val - b_val)
    if rule.relative:
        if b_val == 0:
            raise RuleError(f"relative drop undefined: the baseline's {metric} is 0")
        drop = drop / abs(b_val)
    evidence: dict[str, Any] = {"baseline": b_val, "candidate": c_val}
    if per_task:
        evidence["task"] = k + 1
    return drop, which[k], evidence, metric + (f" at task {k + 1}" if per_task and at != "final" else "")


def _judge_baseline(
    rule: BaselineRule,
    runs: Sequence[MetricsResult],
    base: MetricsResult | None,
    higher_is_better: bool | None,
) -> Judged:
    if base is None:
        raise RuleError("needs a baseline run (--baseline LOG)")
    if rule.baseline == "classes":
        drop, run, evidence, subject = _class_drop(rule, runs, base)
    else:
        assert higher_is_better is not None
        drop, run, evidence, subject = _metric_drop(rule, runs, base, higher_is_better)
    if run is not None:
        evidence["seed"] = seed_of(runs[run], run)
        evidence["run"] = run
    margin = rule.max_drop - drop
    unit = " (relative)" if rule.relative else ""
    ok = margin >= -TOLERANCE
    message = (
        f"{subject}: {fmt_short(evidence['baseline'])} → {fmt_short(evidence['candidate'])}, "
        f"drop {fmt_short(drop)}{unit} "
        f"({'within' if ok else 'exceeds'} {rule.max_drop:g})"
    )
    return Judged(drop, rule.max_drop, "<=", margin, evidence, message)


def judge_baseline(rule: BaselineRule, runs: Sequence[MetricsResult], inputs: Inputs) -> Judged:
    """The drop from the baseline, once the baseline is usable and every run complete."""
    if inputs.baseline_problem:
        raise RuleError(inputs.baseline_problem)
    require_complete(runs, inputs.baseline)
    hib = None if rule.baseline == "classes" else metric_info(rule.baseline).higher_is_better
    return _judge_baseline(rule, runs, inputs.baseline, hib)


JUDGE = Judge("baseline", BaselineRule, subject=lambda rule: rule.baseline, judge=judge_baseline)
