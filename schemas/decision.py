"""`clgate.decision/v1`: the gate's verdict, rule by rule, with the evidence and the hashes of its inputs.

Verdict precedence: ERROR (a rule could not be evaluated, or the inputs were invalid) over FAIL (a
``block`` rule failed) over WARN (a ``warn`` rule failed) over PASS. A run whose training diverged makes
the verdict FAIL (unless the inputs are invalid: ERROR); a partial input never passes a rule that needs
what is missing (see docs/gate.md, "What the gate refuses to judge, and why"). A decision is deterministic:
the
same logs, policy and baseline give the same decision (``provenance`` is whatever the caller passed).
The ``decision.json`` file written beside the reports also carries ``sha256``, the hash of the rest of
the document (:func:`decision_sha256`), so an edited file shows.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from clgate.schemas.fmeca import FmecaWorksheet
from clgate.schemas.notebook import decision_html, frame
from clgate.schemas.vocab import Verdict, exit_code

DECISION_FORMAT: Final = "clgate.decision/v1"

RuleStatus = Literal["pass", "warn", "fail", "error"]


class RuleResult(BaseModel):
    """One rule of the policy, evaluated."""

    model_config = ConfigDict(extra="forbid")

    index: int = Field(description="Position of the rule in the policy (rules[index]).")
    id: str = Field(description="The rule's id, or a readable default such as 'mica@worst >= 0.5'.")
    kind: str = Field(description="metric, class, baseline, fmeca, or the kind of a plug-in rule.")
    metric: str | None = Field(None, description="Metric id (or 'classes', 'fmeca.priority', 'fmeca.rpn').")
    severity: Literal["block", "warn"]
    value: float | None = Field(None, description="The value judged (null when it could not be computed).")
    threshold: float | None = None
    comparison: Literal[">=", "<=", "<"] | None = Field(
        None, description="value COMPARISON threshold must hold for the rule to pass."
    )
    margin: float | None = Field(
        None, description="How far inside the threshold (>= 0 passes, < 0 fails), in the value's units."
    )
    passed: bool | None = Field(None, description="null when the rule could not be evaluated.")
    status: RuleStatus
    message: str = Field(description="One sentence for a person.")
    evidence: dict[str, Any] = Field(
        default_factory=dict,
        description="Where the value came from: task (1-based), class, iteration, seed …",
    )


class WorstClass(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: int
    name: str
    accuracy: float | None


class PooledClassResult(BaseModel):
    """NI/NIC logs: one real class pooled over its cells (its sample groups) at the last task end, beside
    the cell view that the gate judges."""

    model_config = ConfigDict(extra="forbid")
    id: int = Field(description="The class id (the log's class_of value).")
    name: str
    accuracy: float | None = Field(
        description=(
            "Correct / evaluated samples of its cells learned by the last task end (mean over runs; null "
            "without counts)."
        )
    )
    correct: int | None = Field(None, description="Correct samples over those cells, summed over runs.")
    total: int | None = Field(None, description="Evaluated samples over those cells, summed over runs.")
    cells: list[str] = Field(description="Its cells learned by the last task end, by name.")
    worst_cell: str | None = Field(
        None, description="Its cell with the lowest final accuracy (mean over runs): what the gate judges."
    )
    worst_cell_accuracy: float | None = None


class WorstMoment(BaseModel):
    """The worst class at its worst moment (after it was learned): which class, when, in which run."""

    model_config = ConfigDict(extra="forbid")
    class_id: int
    class_name: str
    task: int = Field(description="1-based task that introduces the class.")
    accuracy: float = Field(description="Its accuracy at that moment (a fraction).")
    iteration: int | None = Field(None, description="Training iteration of the evaluation point.")
    seed: Any = Field(None, description="Seed of the run (the least favourable one with several).")


class Headline(BaseModel):
    """The values a dashboard shows (mean over runs); what Prometheus gauges export."""

    model_config = ConfigDict(extra="forbid")

    acc: float | None = Field(None, description="Final mean task accuracy (acc at the last task).")
    mica: float | None = None
    wamica: float | None = None
    min_acc: float | None = None
    min_class_acc: float | None = None
    worst_moment: WorstMoment | None = Field(
        None, description="Where min_class_acc was reached: class, iteration and seed (lowest over runs)."
    )
    wc_acc: float | None = None
    class_regression: float | None = Field(None, description="Largest class drop against the baseline.")
    class_regression_class: str | None = Field(
        None, description="The class with that drop (in the run with the largest one): what an alert names."
    )
    worst_classes: list[WorstClass] = Field(
        default_factory=list, description="Lowest final accuracies first."
    )
    pooled_classes: list[PooledClassResult] | None = Field(
        None,
        description=(
            "NI/NIC logs (where worst_classes and worst_moment name cells): each real class pooled over its "
            "cells, lowest accuracy first; absent for an NC log."
        ),
        # an NC decision serialises (and hashes) as it did before the field existed
        exclude_if=lambda value: value is None,
    )
    plugins: dict[str, float | None] = Field(
        default_factory=dict,
        description=(
            "Plug-in metric id → its final value (mean over runs); left out when no plug-in metric is "
            "installed."
        ),
        # a decision made without plug-ins serialises (and hashes) as it did before the field existed
        exclude_if=lambda plugins: not plugins,
    )


class Hashes(BaseModel):
    model_config = ConfigDict(extra="forbid")
    logs: list[str] = Field(description="sha256 of each log's canonical JSON, in input order.")
    policy: str
    baseline: str | None = None


class Decision(BaseModel):
    """The gate's answer."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["clgate.decision/v1"] = DECISION_FORMAT
    verdict: Verdict
    summary: str = Field(description="One line: verdict and the reasons.")
    policy_name: str
    policy_version: str
    rules: list[RuleResult]
    errors: list[str] = Field(default_factory=list, description="Input problems (verdict ERROR).")
    complete: bool = Field(
        True,
        description=(
            "False when a run or the baseline is partial: rules that need what is missing do not pass."
        ),
    )
    incomplete: list[str] = Field(
        default_factory=list, description="One line per partial run: its seed and how many tasks it finished."
    )
    diverged: list[str] = Field(
        default_factory=list, description="One line per run whose training diverged (verdict FAIL at best)."
    )
    headline: Headline = Field(default_factory=Headline)
    fmeca: FmecaWorksheet | None = None
    hashes: Hashes
    clgate_version: str
    runs: int = Field(description="Number of logs (seeds) judged.")
    seeds: list[Any] = Field(default_factory=list)
    strategy: str | None = None
    provenance: dict[str, Any] = Field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        """0 PASS/WARN, 1 FAIL, 2 ERROR (the CLI adds --fail-on-warn)."""
        return exit_code(self.verdict)

    def _repr_html_(self) -> str:
        """Jupyter: the verdict, the worst class at its worst moment, the rules, a heatmap."""
        return decision_html(self)

    def to_frame(self) -> Any:
        """The rules as a pandas DataFrame, one row per rule (needs pandas)."""
        columns = (
            "id",
            "kind",
            "metric",
            "severity",
            "status",
            "value",
            "threshold",
            "comparison",
            "message",
        )
        return frame([r.model_dump(include=set(columns)) for r in self.rules], columns)

    def to_pandas(self) -> Any:
        """The same as :meth:`to_frame`."""
        return self.to_frame()


def decision_sha256(document: dict[str, Any]) -> str:
    """SHA-256 of a decision document's canonical JSON (sorted keys, no spaces, UTF-8), leaving out the
    ``sha256`` member that ``decision.json`` carries: recompute it to check the file was not edited.

    >>> doc = {"verdict": "PASS", "rules": []}
    >>> decision_sha256(doc) == decision_sha256({**doc, "sha256": "anything"})
    True
    >>> decision_sha256(doc) == decision_sha256({**doc, "verdict": "FAIL"})
    False
    """
    body = {k: v for k, v in document.items() if k != "sha256"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
