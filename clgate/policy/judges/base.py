"""What every rule judge shares: the judged value, the errors that make a rule ``error``, the inputs
beside the runs, and the helpers that name runs and missing values in the evidence."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from clgate.schemas.fmeca import FmecaWorksheet
from clgate.schemas.metrics import MetricsResult

TOLERANCE = 1e-9


class RuleError(Exception):
    """The rule cannot be evaluated on these inputs (becomes a status-``error`` result)."""


class IncompleteInput(RuleError):
    """The rule needs a task or a seed the input does not have, and what it has does not violate it."""

    def __init__(self, missing: list[dict[str, Any]], note: str = "") -> None:
        self.missing = missing
        super().__init__("incomplete input: " + describe_missing(missing) + (f" ({note})" if note else ""))


@dataclass
class Judged:
    """A judge's answer for one rule: the value, the threshold it met or violated, and why."""

    value: float
    threshold: float
    comparison: str
    margin: float
    evidence: dict[str, Any]
    message: str


@dataclass(frozen=True)
class Inputs:
    """What a rule may need beside the candidate's runs."""

    baseline: MetricsResult | None = None
    worksheet: FmecaWorksheet | None = None
    baseline_problem: str | None = None


@dataclass(frozen=True)
class Judge:
    """One entry of the judges' table: the rule kind (``kind`` in ``clgate.schemas.policy``), the rule
    model it judges, what the result's ``metric`` field names, and the judging function."""

    kind: str
    rule_type: type
    subject: Callable[[Any], str]
    judge: Callable[[Any, Sequence[MetricsResult], Inputs], Judged]
    label: Callable[[Any], str] | None = None
    """A rule's default id in reports (plug-in kinds; the built-ins' come from ``rule_label``)."""


def seed_of(result: MetricsResult, run: int) -> Any:
    return result.meta.get("seed", run)


def metric_series(result: MetricsResult, metric: str) -> tuple[list[float | None], bool]:
    """(values, per_task): a scalar becomes a one-element series."""
    if metric not in result.metrics:
        raise RuleError(f"metric {metric!r} was not computed")
    v = result.metrics[metric]
    if isinstance(v, list):
        return list(v), True
    return [v], False


def null_reason(results: Sequence[MetricsResult], metric: str) -> str:
    for r in results:
        if metric in r.reasons:
            return r.reasons[metric]
    return "undefined for these inputs"


def unfinished(result: MetricsResult) -> bool:
    return result.finished_tasks < result.n_tasks


def partial_run(result: MetricsResult, seed: Any, run: int | None) -> dict[str, Any]:
    """The evidence entry for a run that did not finish (``incomplete`` lists these)."""
    return {
        "seed": seed,
        "run": run,
        "why": f"partial run ({result.finished_tasks} of {result.n_tasks} tasks finished)",
    }


def describe_missing(missing: Sequence[dict[str, Any]]) -> str:
    """``seed 1: task(s) 3, 4, 5 not finished; seed 2: task 2 null`` (one clause per run)."""
    parts = []
    for m in missing:
        tasks = m.get("tasks")
        where = "" if not tasks else " task(s) " + ", ".join(map(str, tasks))
        parts.append(f"seed {m['seed']}:{where} {m['why']}")
    return "; ".join(parts)


def require_complete(runs: Sequence[MetricsResult], baseline: MetricsResult | None) -> None:
    """Baseline and FMECA rules judge final values: every run (and the baseline) must be complete."""
    missing = [partial_run(r, seed_of(r, i), i) for i, r in enumerate(runs) if unfinished(r)]
    if baseline is not None and unfinished(baseline):
        missing.append(partial_run(baseline, f"{seed_of(baseline, 0)} (baseline)", None))
    if missing:
        raise IncompleteInput(missing)
