"""`clgate.policy/v1`: the rules a release gate applies to one or more evaluation logs.

A policy is a YAML or JSON document::

    format: clgate.policy/v1
    name: digits-release
    version: "3"
    rules:
      - {metric: acc, at: final, floor: 0.80}                 # a metric rule
      - {metric: mica, floor: 0.60, bound: wilson95}          # … on the lower confidence bound
      - {metric: wf10, ceiling: 0.30, severity: warn}         # a ceiling; warn only
      - {classes: ["0", "7"], at: min_after_learned, floor: 0.5}  # per-class floor
      - {baseline: classes, max_drop: 0.05}                   # no class drops more than 5 points
      - {fmeca: priority, fail_at: High}                      # no High action priority
    fmeca: {default_severity: 6, severity: {"7": 9}, default_detection: 6}
    registry: {move_alias_on: [PASS, WARN]}                   # optional; default PASS only

Each rule is recognised by its key: ``metric``, ``classes``, ``baseline`` or ``fmeca``. This module
checks the structure (pydantic only); :class:`clgate.policy.Policy` adds the checks that need the
metric registry (unknown ids, per-task vs scalar, ranges). Conventions fixed here:

- A ``floor`` passes when the value is greater than **or equal to** it; a ``ceiling`` passes when the
  value is less than or equal to it. ``max_drop`` is a ceiling on the drop. An FMECA ``limit`` on the
  RPN fails at ``RPN >= limit`` (the usual "act from this RPN on").
- ``task:N`` counts tasks from 1, like the evaluation log's ``task`` field and the papers' k.
- ``over_runs`` defaults to ``worst``: with several seeds the gate judges the least favourable one.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

POLICY_FORMAT: Final = "clgate.policy/v1"
AliasVerdict = Literal["PASS", "WARN", "FAIL"]  # a verdict that may move the alias: never ERROR
DEFAULT_ALIAS_VERDICTS: Final[tuple[AliasVerdict, ...]] = ("PASS",)  # without registry: PASS only

Severity = Literal["block", "warn"]
OverRuns = Literal["mean", "worst"]
Bound = Literal["point", "wilson95"]
Priority = Literal["High", "Medium", "Low"]
PRIORITY_RANK: dict[str, int] = {"Low": 0, "Medium": 1, "High": 2}

_AT_RE = re.compile(r"^(final|all|worst|task:(\d+))$")

Threshold = Annotated[float, Field(allow_inf_nan=False)]
Rating = Annotated[int, Field(ge=1, le=10)]


def parse_at(at: str) -> tuple[str, int | None]:
    """``"task:3"`` → ``("task", 3)``; ``"final"`` → ``("final", None)``.

    >>> parse_at("task:2"), parse_at("worst")
    (('task', 2), ('worst', None))
    """
    m = _AT_RE.match(at)
    if not m:
        raise ValueError(f"{at!r} is not one of final, all, worst, task:N")
    if m.group(2) is not None:
        return "task", int(m.group(2))
    return m.group(1), None


class _Rule(BaseModel):
    """What every rule has: an id, a description, a severity and how several seeds are judged."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = Field(None, description="Short name shown in reports and JUnit (default: derived).")
    description: str | None = Field(None, description="Why the rule exists, for the report.")
    severity: Severity = Field("block", description="block: failing fails the gate; warn: it only warns.")
    over_runs: OverRuns = Field("worst", description="Several seeds: judge their mean, or the worst one.")


class MetricRule(_Rule):
    """A floor and/or ceiling on a registry metric."""

    kind: Literal["metric"] = "metric"
    metric: str = Field(description="Metric id from the registry (acc, mica, min_acc, wf10 …).")
    at: str = Field("final", description="Per-task metrics: final | all | worst | task:N (1-based).")
    bound: Bound = Field("point", description="wilson95: gate on the 95 % lower confidence bound.")
    floor: Threshold | None = None
    ceiling: Threshold | None = None

    @field_validator("at")
    @classmethod
    def _check_at(cls, v: str) -> str:
        kind, n = parse_at(v)
        if kind == "task" and n is not None and n < 1:
            raise ValueError("task:N counts tasks from 1")
        return v

    @model_validator(mode="after")
    def _check_thresholds(self) -> MetricRule:
        if self.floor is None and self.ceiling is None:
            raise ValueError("a metric rule needs a floor or a ceiling")
        if self.floor is not None and self.ceiling is not None and self.floor > self.ceiling:
            raise ValueError(f"floor ({self.floor}) is above ceiling ({self.ceiling})")
        return self


class ClassRule(_Rule):
    """A floor on the accuracy of named classes (``"*"``: every class)."""

    kind: Literal["class"] = "class"
    classes: list[str | int] | Literal["*"] = Field(description='Class names or ids, or "*" for all.')
    at: Literal["final", "min_after_learned"] = Field(
        "final", description="final accuracy, or the lowest accuracy after the class's task ended."
    )
    bound: Bound = "point"
    floor: Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]

    @field_validator("classes")
    @classmethod
    def _non_empty(cls, v: Any) -> Any:
        if isinstance(v, list) and not v:
            raise ValueError('name at least one class (or "*")')
        return v


class BaselineRule(_Rule):
    """The largest allowed drop against a baseline run, of a metric or of any class's final accuracy."""

    kind: Literal["baseline"] = "baseline"
    baseline: str = Field(description='Metric id, or "classes" for the largest drop of any class.')
    at: str = Field("final", description="Per-task metrics: which task (final | task:N).")
    max_drop: Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
    relative: bool = Field(False, description="Drop as a fraction of the baseline value.")

    @field_validator("at")
    @classmethod
    def _check_at(cls, v: str) -> str:
        kind, n = parse_at(v)
        if kind not in ("final", "task"):
            raise ValueError("a baseline rule compares one value: use final or task:N")
        if n is not None and n < 1:
            raise ValueError("task:N counts tasks from 1")
        return v


class FmecaRule(_Rule):
    """Gate on the FMECA worksheet: any mode at or above a priority, or any RPN at or above a limit."""

    kind: Literal["fmeca"] = "fmeca"
    fmeca: Literal["priority", "rpn"]
    fail_at: Literal["High", "Medium"] = Field(
        "High", description="priority: fail if any mode is at least this."
    )
    limit: Annotated[int, Field(ge=1, le=1000)] | None = Field(
        None, description="rpn: fail if any RPN ≥ limit."
    )
    occurrence: Literal["final", "worst"] = Field(
        "worst", description="Which occurrence rating: final error, or worst error after learned."
    )

    @model_validator(mode="after")
    def _check_limit(self) -> FmecaRule:
        if self.fmeca == "rpn" and self.limit is None:
            raise ValueError("an rpn rule needs a limit (1-1000)")
        if self.fmeca == "priority" and self.limit is not None:
            raise ValueError("limit belongs to rpn rules; a priority rule takes fail_at")
        return self


RuleBase = _Rule
"""The fields every rule has; a plug-in rule kind's model subclasses it (``clgate.rules`` entry points)."""

PLUGIN_KIND = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


class PluginRule(_Rule):
    """A rule of a plug-in kind (``{kind: class_group_mean, …}``): a ``kind`` that no built-in rule has.

    Its other fields are the plug-in's: they are validated when the policy is loaded, by the model of the
    installed plug-in that provides the kind (``clgate plugins`` lists them); an unknown kind is refused.
    """

    model_config = ConfigDict(extra="allow", json_schema_extra={"additionalProperties": True})

    kind: str = Field(
        pattern=PLUGIN_KIND.pattern,
        description="The rule kind of an installed plug-in (validated at load, with the plug-in's fields).",
    )


RULE_TAGS = ("metric", "class", "baseline", "fmeca")
"""The built-in rule kinds (each recognised by its key); plug-in kinds are tagged :data:`PLUGIN_TAG`."""
PLUGIN_TAG = "plugin"
_KEY_TO_TAG = {"metric": "metric", "classes": "class", "baseline": "baseline", "fmeca": "fmeca"}


def _rule_tag(v: Any) -> str | None:
    if isinstance(v, dict):
        kind = v.get("kind")
        if isinstance(kind, str) and kind not in RULE_TAGS:
            return PLUGIN_TAG  # a plug-in kind: its own fields may be named like a built-in's keys
        found = [tag for key, tag in _KEY_TO_TAG.items() if key in v]
        if len(found) == 1:
            return found[0]
        return None
    kind = getattr(v, "kind", None)
    return kind if kind in RULE_TAGS or kind is None else PLUGIN_TAG


Rule = Annotated[
    Annotated[MetricRule, Tag("metric")]
    | Annotated[ClassRule, Tag("class")]
    | Annotated[BaselineRule, Tag("baseline")]
    | Annotated[FmecaRule, Tag("fmeca")]
    | Annotated[PluginRule, Tag(PLUGIN_TAG)],
    Discriminator(
        _rule_tag,
        custom_error_type="rule_kind",
        custom_error_message=(
            "a rule needs exactly one of the keys metric, classes, baseline, fmeca (or the kind of a plug-in)"
        ),
    ),
]


class OccurrenceRow(BaseModel):
    """Error rates of at least ``at_least`` get ``rating``."""

    model_config = ConfigDict(extra="forbid")
    at_least: Annotated[float, Field(gt=0.0, le=1.0, allow_inf_nan=False)]
    rating: Rating


# The default occurrence scale is made for classifier error rates (the share of a class's test images
# that are misclassified), not for manufacturing defect rates: ≥ 50 % → 10, ≥ 30 % → 9, ≥ 20 % → 8,
# ≥ 10 % → 7, ≥ 5 % → 6, ≥ 2 % → 5, ≥ 1 % → 4, ≥ 0.5 % → 3, ≥ 0.1 % → 2, below → 1. Under the AIAG
# PFMEA scale (≥ 1 in 10 → 10) every class of a real classifier rates 10 and the worksheet cannot tell
# one class from another; that scale stays available as AIAG_PFMEA_OCCURRENCE_SCALE (docs/gate.md).
DEFAULT_OCCURRENCE_SCALE: list[tuple[float, int]] = [
    (0.50, 10),
    (0.30, 9),
    (0.20, 8),
    (0.10, 7),
    (0.05, 6),
    (0.02, 5),
    (0.01, 4),
    (0.005, 3),
    (0.001, 2),
]
DEFAULT_OCCURRENCE_OTHERWISE = 1
# ≥1 in 10 → 10, 1 in 20 → 9, 1 in 50 → 8, 1 in 100 → 7, 1 in 500 → 6, 1 in 2,000 → 5,
# 1 in 10,000 → 4, 1 in 100,000 → 3, below → 2 (AIAG PFMEA occurrence scale, 3rd edition).
AIAG_PFMEA_OCCURRENCE_SCALE: list[tuple[float, int]] = [
    (1 / 10, 10),
    (1 / 20, 9),
    (1 / 50, 8),
    (1 / 100, 7),
    (1 / 500, 6),
    (1 / 2_000, 5),
    (1 / 10_000, 4),
    (1 / 100_000, 3),
]


class PriorityRow(BaseModel):
    """Action priority for the modes whose S, O and D fall in these inclusive ranges."""

    model_config = ConfigDict(extra="forbid")
    severity: tuple[Rating, Rating]
    occurrence: tuple[Rating, Rating]
    detection: tuple[Rating, Rating]
    priority: Priority


def _ap_rows() -> list[tuple[tuple[int, int], tuple[int, int], tuple[int, int], str]]:
    """The AIAG-VDA (2019) action-priority table: S bands first, then O bands, then D bands."""
    d_bands = [(7, 10), (5, 6), (2, 4), (1, 1)]
    table = {  # (S band) → {(O band): [AP for D 7-10, 5-6, 2-4, 1]}
        (9, 10): {(8, 10): "HHHH", (6, 7): "HHHH", (4, 5): "HHHM", (2, 3): "HMLL", (1, 1): "LLLL"},
        (7, 8): {(8, 10): "HHHH", (6, 7): "HHHM", (4, 5): "HMMM", (2, 3): "MMLL", (1, 1): "LLLL"},
        (4, 6): {(8, 10): "HHMM", (6, 7): "MMML", (4, 5): "MLLL", (2, 3): "LLLL", (1, 1): "LLLL"},
        (2, 3): {(8, 10): "MMLL", (6, 7): "LLLL", (4, 5): "LLLL", (2, 3): "LLLL", (1, 1): "LLLL"},
        (1, 1): {(1, 10): "LLLL"},
    }
    name = {"H": "High", "M": "Medium", "L": "Low"}
    rows = []
    for s_band, by_o in table.items():
        for o_band, aps in by_o.items():
            for d_band, ap in zip(d_bands, aps, strict=True):
                rows.append((s_band, o_band, d_band, name[ap]))
    return rows


DEFAULT_ACTION_PRIORITY = _ap_rows()


class FmecaConfig(BaseModel):
    """How the FMECA worksheet rates each class (failure mode "class X misclassified")."""

    model_config = ConfigDict(extra="forbid")

    default_severity: Rating | None = Field(
        None,
        description="S of a class not listed in severity; none: such a class is unrated (no O × S priority).",
    )
    severity: dict[str, Rating] = Field(default_factory=dict, description="Class name (or id) → S.")
    default_detection: Rating = Field(5, description="D of a class not listed in detection.")
    detection: dict[str, Rating] = Field(default_factory=dict, description="Class name (or id) → D.")
    occurrence_scale: list[OccurrenceRow] = Field(
        default_factory=lambda: [OccurrenceRow(at_least=a, rating=r) for a, r in DEFAULT_OCCURRENCE_SCALE],
        description="Error rate → O, checked from the highest rate down; the first row reached wins.",
    )
    occurrence_otherwise: Rating = Field(
        DEFAULT_OCCURRENCE_OTHERWISE, description="O of an error rate below every row."
    )
    action_priority: list[PriorityRow] = Field(
        default_factory=lambda: [
            PriorityRow(severity=s, occurrence=o, detection=d, priority=p)  # type: ignore[arg-type]
            for s, o, d, p in DEFAULT_ACTION_PRIORITY
        ],
        description="First row whose S, O and D ranges all match gives the priority; none → Low.",
    )
    over_runs: OverRuns = Field("worst", description="Several seeds: each class's mean or worst error.")
    bound: Bound = Field("point", description="wilson95: rate the upper bound of the error rate.")

    @field_validator("severity", "detection", mode="before")
    @classmethod
    def _keys_as_text(cls, v: Any) -> Any:
        return {str(k): val for k, val in v.items()} if isinstance(v, dict) else v

    @field_validator("occurrence_scale")
    @classmethod
    def _scale_order(cls, rows: list[OccurrenceRow]) -> list[OccurrenceRow]:
        if not rows:
            raise ValueError("needs at least one row")
        for i in range(1, len(rows)):
            if not (rows[i].at_least < rows[i - 1].at_least and rows[i].rating < rows[i - 1].rating):
                raise ValueError(
                    f"row {i}: rows must go from the highest error rate and rating down "
                    f"(at_least and rating both decreasing)"
                )
        return rows

    @model_validator(mode="after")
    def _otherwise_below(self) -> FmecaConfig:
        if self.occurrence_otherwise >= self.occurrence_scale[-1].rating:
            raise ValueError("occurrence_otherwise must be below the last row's rating")
        return self


class RegistryConfig(BaseModel):
    """What the verdict does to the model registry (``clgate gate --model-uri … --alias …``)."""

    model_config = ConfigDict(extra="forbid")

    move_alias_on: list[AliasVerdict] = Field(
        default_factory=lambda: list(DEFAULT_ALIAS_VERDICTS),
        min_length=1,
        description="Verdicts that move the registry alias to the candidate (default [PASS]); never ERROR.",
    )

    @field_validator("move_alias_on", mode="before")
    @classmethod
    def _no_error(cls, v: Any) -> Any:
        if isinstance(v, list) and "ERROR" in v:
            raise ValueError(
                "ERROR never moves the alias: an error certifies no release (use PASS, WARN, FAIL)"
            )
        return v

    @field_validator("move_alias_on")
    @classmethod
    def _once_each(cls, v: list[AliasVerdict]) -> list[AliasVerdict]:
        return list(dict.fromkeys(v))


class Policy(BaseModel):
    """A release policy: rules over metric ids plus the FMECA ratings (structure only; see module doc)."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["clgate.policy/v1"] = POLICY_FORMAT
    name: str = Field(min_length=1)
    version: str = "1"
    description: str = ""
    task_accuracy: Literal["macro", "micro"] = Field("macro", description="How task accuracy pools classes.")
    rules: list[Rule] = Field(min_length=1)
    fmeca: FmecaConfig = Field(default_factory=FmecaConfig)
    registry: RegistryConfig | None = Field(
        None, description="Which verdicts move the registry alias; none: PASS only."
    )

    @property
    def move_alias_on(self) -> tuple[str, ...]:
        """The verdicts that move the registry alias: the policy's ``registry.move_alias_on``, else PASS.

        >>> Policy.model_validate({"name": "p", "rules": [{"metric": "acc", "floor": 0.5}]}).move_alias_on
        ('PASS',)
        """
        return tuple(self.registry.move_alias_on) if self.registry else DEFAULT_ALIAS_VERDICTS

    @field_validator("version", mode="before")
    @classmethod
    def _version_text(cls, v: Any) -> Any:
        return str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v


def rule_label(rule: MetricRule | ClassRule | BaselineRule | FmecaRule | PluginRule, index: int) -> str:
    """The rule's ``id`` or a readable default.

    >>> rule_label(MetricRule(metric="mica", at="worst", floor=0.5), 0)
    'mica@worst >= 0.5'
    >>> rule_label(BaselineRule(baseline="classes", max_drop=0.05), 3)
    'baseline classes drop <= 0.05'
    """
    if rule.id:
        return rule.id
    if isinstance(rule, MetricRule):
        parts = [rule.metric + ("" if rule.at == "final" else f"@{rule.at}")]
        if rule.bound != "point":
            parts[0] += f"[{rule.bound}]"
        if rule.floor is not None:
            parts.append(f">= {_num(rule.floor)}")
        if rule.ceiling is not None:
            parts.append(f"<= {_num(rule.ceiling)}")
        return " ".join(parts)
    if isinstance(rule, ClassRule):
        which = "all classes" if rule.classes == "*" else "classes " + ",".join(map(str, rule.classes))
        return f"{which} {rule.at} >= {_num(rule.floor)}"
    if isinstance(rule, BaselineRule):
        rel = " (relative)" if rule.relative else ""
        return f"baseline {rule.baseline} drop <= {_num(rule.max_drop)}{rel}"
    if not isinstance(rule, FmecaRule):  # a plug-in kind (its judge may give a better label)
        return f"{rule.kind} #{index}"
    if rule.fmeca == "priority":
        return f"fmeca no {rule.fail_at}{'+' if rule.fail_at == 'Medium' else ''} priority"
    return f"fmeca rpn < {rule.limit}"


def _num(x: float) -> str:
    return f"{x:g}" if math.isfinite(x) else str(x)
