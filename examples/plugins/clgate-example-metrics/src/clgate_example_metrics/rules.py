"""``class_group_mean``: a floor on the mean final accuracy of a named group of classes.

The built-in class rule floors every listed class on its own; this kind floors a group's mean, e.g. the
mean recall over every defect type must stay at or above 0.9 while any single defect may dip lower::

    - {kind: class_group_mean, group: defects, classes: [scratch, dent], floor: 0.9}

Several seeds: ``over_runs: worst`` (default) judges the run with the lowest group mean, ``mean`` the
mean over runs. A class not in the log, or without a final accuracy (a partial run), makes the rule an
error: the group's mean is unknown.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from clgate.policy.judges import Inputs, Judge, Judged, RuleError
from clgate.schemas.metrics import MetricsResult
from clgate.schemas.policy import RuleBase


class ClassGroupMeanRule(RuleBase):
    """``{kind: class_group_mean, group: NAME, classes: [names or ids], floor: 0.9}``."""

    kind: Literal["class_group_mean"]
    group: str = Field(min_length=1, description="The group's name, for reports.")
    classes: list[str | int] = Field(description="Class names or ids of the group.")
    floor: Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]

    @field_validator("classes")
    @classmethod
    def _non_empty(cls, v: list[str | int]) -> list[str | int]:
        if not v:
            raise ValueError("name at least one class")
        return v


def _group_mean(rule: ClassGroupMeanRule, run: MetricsResult) -> float:
    by_name = {c.name: c for c in run.classes}
    by_id = {c.id: c for c in run.classes}
    values = []
    for wanted in rule.classes:
        stats = by_id.get(wanted) if isinstance(wanted, int) else by_name.get(wanted)
        if stats is None:
            raise RuleError(f"group {rule.group!r}: no class {wanted!r} in the log")
        if stats.final_accuracy is None:
            raise RuleError(
                f"group {rule.group!r}: class {stats.name!r} has no final accuracy (partial run?)"
            )
        values.append(stats.final_accuracy)
    return sum(values) / len(values)


def judge_class_group_mean(rule: ClassGroupMeanRule, runs: Sequence[MetricsResult], inputs: Inputs) -> Judged:
    """The group's mean final accuracy (worst run, or mean over runs) against the floor."""
    means = [_group_mean(rule, r) for r in runs]
    evidence: dict[str, Any]
    if rule.over_runs == "mean":
        value, evidence = sum(means) / len(means), {"over_runs": "mean"}
    else:
        run = min(range(len(means)), key=lambda i: (means[i], i))
        value, evidence = means[run], {"seed": runs[run].meta.get("seed", run), "run": run}
    evidence["group"] = rule.group
    margin = value - rule.floor
    verb = "meets" if margin >= 0 else "violates"
    message = f"mean final accuracy of group {rule.group!r} = {value:.4f} ({verb} >= {rule.floor:g})"
    return Judged(value, rule.floor, ">=", margin, evidence, message)


JUDGE = Judge(
    "class_group_mean",
    ClassGroupMeanRule,
    subject=lambda rule: f"group {rule.group}",
    judge=judge_class_group_mean,
    label=lambda rule: f"group {rule.group} mean >= {rule.floor:g}",
)
