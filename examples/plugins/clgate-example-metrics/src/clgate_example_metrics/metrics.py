"""``cost_weighted_acc``: the accuracy over the classes seen so far, each class weighted by the cost of
missing it.

The costs are the log's ``meta.class_costs`` (class name → cost ≥ 0; a class not listed costs 1), so the
team that records the log says what a miss costs: a missed crack may cost ten times a missed smudge.
Without costs the value is the mean class accuracy over the classes seen.

    cost_weighted_acc_k = Σ_{c seen at k} cost_c · r[k, c] / Σ_{c seen at k} cost_c
"""

from __future__ import annotations

import math

import numpy as np

from clgate.metrics.plugins import MetricInputs, MetricPlugin
from clgate.metrics.steps import Outcome


def class_costs(inputs: MetricInputs) -> np.ndarray:
    """Each class's cost from ``meta.class_costs`` (1 for a class not listed); a bad cost raises."""
    given = inputs.meta.get("class_costs") or {}
    if not isinstance(given, dict):
        raise ValueError("meta.class_costs: expected an object {class name: cost}")
    unknown = sorted(set(map(str, given)) - set(inputs.class_names))
    if unknown:
        raise ValueError(f"meta.class_costs: no class named {', '.join(unknown)} in the log")
    costs = np.ones(inputs.n_classes)
    for c, name in enumerate(inputs.class_names):
        if name in given:
            cost = given[name]
            if (
                isinstance(cost, bool)
                or not isinstance(cost, (int, float))
                or not math.isfinite(cost)
                or cost < 0
            ):
                raise ValueError(f"meta.class_costs[{name!r}]: a cost is a finite number ≥ 0, got {cost!r}")
            costs[c] = float(cost)
    return costs


def cost_weighted_accuracy(inputs: MetricInputs) -> Outcome:
    """Per task end k: the cost-weighted mean accuracy of the classes of tasks 1..k (NaN: undefined).

    >>> out = cost_weighted_accuracy(MetricInputs.example())
    >>> [round(float(v), 4) for v in out.value]
    [0.85, 0.7]
    """
    costs = class_costs(inputs)
    values = np.full(inputs.n_tasks, np.nan)
    for k in range(inputs.finished_tasks):
        seen = inputs.class_task <= k
        acc, w = inputs.r[k, seen], costs[seen]
        ok = ~np.isnan(acc)
        if w[ok].sum() > 0:
            values[k] = float(np.dot(acc[ok], w[ok]) / w[ok].sum())
    evidence: list[dict | None] = [None] * inputs.n_tasks
    if inputs.finished_tasks:  # the class whose misses cost most at the last task end
        k = inputs.finished_tasks - 1
        missed = np.where(inputs.class_task <= k, (1 - inputs.r[k]) * costs, np.nan)
        if not np.isnan(missed).all():
            c = int(np.nanargmax(missed))
            evidence[k] = {
                "class": c,
                "class_name": inputs.class_names[c],
                "cost_of_misses": float(missed[c]),
            }
    return Outcome(values, evidence=evidence, reason="no class seen so far has a cost above 0")


COST_WEIGHTED_ACC = MetricPlugin(
    id="cost_weighted_acc",
    name="Cost-weighted class accuracy",
    description="Accuracy over the classes seen so far, each weighted by meta.class_costs (default 1).",
    shape="per_task",
    higher_is_better=True,
    range=(0.0, 1.0),
    compute=cost_weighted_accuracy,
    source="clgate-example-metrics (example plug-in)",
    gauge=True,
)
