"""`clgate.decision/v1`: the gate's verdict, rule by rule, with the evidence and the hashes of its inputs.

Verdict precedence: ERROR (a rule could not be evaluated, or the inputs were invalid) over FAIL (a
``block`` rule failed) over WARN (a ``warn`` rule failed) over PASS. A decision is deterministic: the
same logs, policy and baseline give the same decision (``provenance`` is whatever the caller passed).
The ``decision.json`` file written beside the reports also carries ``sha256``, the hash of the rest of
the document (:func:`decision_sha256`), so an edited file shows.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from clgate.schemas.fmeca import FmecaWorksheet

DECISION_FORMAT = "clgate.decision/v1"

Verdict = Literal["PASS", "WARN", "FAIL", "ERROR"]
RuleStatus = Literal["pass", "warn", "fail", "error"]


class RuleResult(BaseModel):
    """One rule of the policy, evaluated."""

    model_config = ConfigDict(extra="forbid")

    index: int = Field(description="Position of the rule in the policy (rules[index]).")
    id: str = Field(description="The rule's id, or a readable default such as 'mica@worst >= 0.5'.")
    kind: Literal["metric", "class", "baseline", "fmeca"]
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
        default_factory=dict, description="Where the value came from: task (1-based), class, iteration, seed …"
    )


class WorstClass(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: int
    name: str
    accuracy: float | None


class Headline(BaseModel):
    """The values a dashboard shows (mean over runs); what Prometheus gauges export."""

    model_config = ConfigDict(extra="forbid")

    acc: float | None = Field(None, description="Final mean task accuracy (acc at the last task).")
    mica: float | None = None
    wamica: float | None = None
    min_acc: float | None = None
    min_class_acc: float | None = None
    wc_acc: float | None = None
    class_regression: float | None = Field(None, description="Largest class drop against the baseline.")
    worst_classes: list[WorstClass] = Field(default_factory=list, description="Lowest final accuracies first.")


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
        return {"PASS": 0, "WARN": 0, "FAIL": 1, "ERROR": 2}[self.verdict]


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
