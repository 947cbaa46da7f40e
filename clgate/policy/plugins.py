"""Plug-in rule kinds: policy rules that other distributions add through the ``clgate.rules`` entry points.

A plug-in publishes a :class:`~clgate.policy.judges.base.Judge` — the same table entry as a built-in
kind's — under its kind's name::

    [project.entry-points."clgate.rules"]
    class_group_mean = "my_package.rules:JUDGE"

``JUDGE.rule_type`` is a pydantic model that subclasses :class:`clgate.schemas.policy.RuleBase` (so the
rule has ``id``, ``description``, ``severity``, ``over_runs``) with ``kind: Literal["class_group_mean"]``
and the kind's own fields; ``JUDGE.judge(rule, runs, inputs)`` returns a
:class:`~clgate.policy.judges.base.Judged` or raises :class:`~clgate.policy.judges.base.RuleError`,
exactly like the built-in judges. A policy names the kind (``{kind: class_group_mean, …}``); its fields
are validated by that model when the policy is loaded.

A plug-in kind cannot take a built-in kind's name. One that cannot be loaded, or is not a ``Judge`` of a
model of its kind, is *broken*: a policy that uses it loads, and that rule's result is ``error`` naming
the distribution, the entry point and the problem (never a pass); so is a rule whose judge raises
anything but ``RuleError`` or returns something that is not a finite ``Judged``. Like plug-in metrics,
plug-in kinds run in the trusted process: the operator installs them (``CLGATE_PLUGINS=off``: none).
"""

from __future__ import annotations

import functools
import math
import typing
from dataclasses import dataclass

from pydantic import BaseModel

from clgate.metrics.plugins import FAILED, PLUGIN_ID, PluginOrigin, discover
from clgate.metrics.registry import found_plugins
from clgate.policy.judges.base import TOLERANCE, Judge, Judged
from clgate.schemas.metrics import MetricsResult, RunsResult
from clgate.schemas.policy import RULE_TAGS, RuleBase

ENTRY_POINT_GROUP = "clgate.rules"


@dataclass(frozen=True)
class LoadedKind:
    """A plug-in rule kind: its judge (None when broken), where it came from, and its problem."""

    kind: str
    origin: PluginOrigin
    judge: Judge | None
    problem: str | None = None


@dataclass(frozen=True, eq=False)
class RuleKindPlugins:
    """Every ``clgate.rules`` entry point found: the kinds (usable or broken) and the refused ones."""

    kinds: dict[str, LoadedKind]
    refused: list[str]

    def warnings(self) -> list[str]:
        """One line per broken or refused plug-in rule kind."""
        broken = [
            f"plug-in rule kind {k.kind!r} ({k.origin}) is broken: {k.problem}"
            for k in self.kinds.values()
            if k.problem
        ]
        return broken + self.refused


def _kind_literal(model: type[BaseModel]) -> tuple[object, ...]:
    field = model.model_fields.get("kind")
    return typing.get_args(field.annotation) if field is not None else ()


def validate_rule(judge: Judge, rule: BaseModel) -> BaseModel:
    """A plug-in rule (``PluginRule``, its fields as extras) validated by the model of its kind's judge
    (checked a ``RuleBase`` subclass at load); raises pydantic's ``ValidationError``."""
    model = typing.cast("type[BaseModel]", judge.rule_type)
    return model.model_validate(rule.model_dump())


def judge_problem(judge: object, kind: str) -> str | None:
    """Why ``judge`` cannot judge rules of ``kind``, or None."""
    if not isinstance(judge, Judge):
        return f"is a {type(judge).__name__}, not a clgate.policy.judges.Judge"
    problems = []
    if judge.kind != kind:
        problems.append(f"its Judge has kind {judge.kind!r} but its entry point is named {kind!r}")
    model = judge.rule_type
    if not (isinstance(model, type) and issubclass(model, RuleBase)):
        problems.append("rule_type: must be a pydantic model that subclasses clgate.schemas.policy.RuleBase")
    elif _kind_literal(model) != (kind,):
        problems.append(f'rule_type: its field kind must be Literal["{kind}"]')
    if not callable(judge.judge) or not callable(judge.subject):
        problems.append("judge and subject must be callable")
    return "; ".join(problems) or None


def load_rule_kinds() -> RuleKindPlugins:
    """Every ``clgate.rules`` entry point, checked (see the module docstring)."""
    found: dict[str, list[LoadedKind]] = {}
    refused: list[str] = []
    for origin, obj, problem in discover(ENTRY_POINT_GROUP):
        kind = origin.name
        if not PLUGIN_ID.match(kind):
            refused.append(
                f"plug-in rule kind refused ({origin}): {kind!r} is not a lowercase identifier "
                "([a-z][a-z0-9_]*, at most 64 characters)"
            )
            continue
        if kind in RULE_TAGS:
            refused.append(f"plug-in rule kind refused ({origin}): {kind!r} is a built-in rule kind")
            continue
        problem = problem or judge_problem(obj, kind)
        judge = obj if problem is None and isinstance(obj, Judge) else None
        found.setdefault(kind, []).append(LoadedKind(kind, origin, judge, problem))
    kinds: dict[str, LoadedKind] = {}
    for kind, entries in sorted(found.items()):
        if len(entries) > 1:
            who = "; ".join(str(e.origin) for e in entries)
            entries = [LoadedKind(kind, entries[0].origin, None, f"kind {kind!r} is declared twice ({who})")]
        kinds[kind] = entries[0]
    return RuleKindPlugins(kinds, refused)


@functools.cache
def rule_kinds() -> RuleKindPlugins:
    """:func:`load_rule_kinds`, once per process (:func:`reload` forgets it)."""
    return load_rule_kinds()


def reload() -> None:
    """Forget the rule kinds found so far."""
    rule_kinds.cache_clear()


def finite(x: object) -> bool:
    """Whether ``x`` is a real, finite number (what a judged value and threshold must be)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def judged_problem(judged: object) -> str | None:
    """Why a plug-in judge's answer cannot be a rule result, or None: a :class:`Judged` with a finite value,
    threshold and margin, a known comparison and a message, whose margin does not contradict the value,
    threshold and comparison it reports (the margin decides pass or fail; a report showing ``0.1 >= 0.5``
    as a pass would mislead). Within :data:`TOLERANCE` either sign agrees.

    >>> judged_problem(Judged(0.1, 0.5, ">=", 0.4, {}, "fine"))
    'answered margin 0.4 for 0.1 >= 0.5: the margin contradicts the comparison'
    """
    if not (
        isinstance(judged, Judged)
        and all(finite(x) for x in (judged.value, judged.threshold, judged.margin))
        and judged.comparison in (">=", "<=", "<")
        and isinstance(judged.message, str)
    ):
        return (
            f"answered {type(judged).__name__} without a finite value, threshold and margin, a comparison "
            ">=, <= or < and a message"
        )
    v, t, m = judged.value, judged.threshold, judged.margin
    distance = v - t if judged.comparison == ">=" else t - v
    if (m >= -TOLERANCE and distance < -TOLERANCE) or (m < -TOLERANCE and distance > TOLERANCE):
        return (
            f"answered margin {m:g} for {v:g} {judged.comparison} {t:g}: "
            "the margin contradicts the comparison"
        )
    return None


def names_problem(label: object, subject: object) -> str | None:
    """Why a plug-in's rule label (the result's id) or subject (its metric) is unusable: text, or None for
    the subject."""
    if not isinstance(label, str):
        return f"labelled the rule with a {type(label).__name__}, not text"
    if subject is not None and not isinstance(subject, str):
        return f"named its subject with a {type(subject).__name__}, not text"
    return None


def plugin_warnings(metrics: MetricsResult | RunsResult | None = None) -> list[str]:
    """One line per broken or refused plug-in (metric or rule kind), and per plug-in metric that failed on
    these results (its null's reason, which names the plug-in): what the CLI prints as warnings. A policy
    that does not use a broken plug-in is judged as without it; these lines say it is there."""
    lines = [*found_plugins().warnings(), *rule_kinds().warnings()]
    runs = [] if metrics is None else (metrics.runs if isinstance(metrics, RunsResult) else [metrics])
    broken = {m.id for m in found_plugins().metrics.values() if m.problem}
    for i, run in enumerate(runs):
        for metric_id, reason in run.reasons.items():
            if reason.startswith(FAILED) and metric_id not in broken:
                where = f" (run {i}, seed {run.meta.get('seed', i)})" if len(runs) > 1 else ""
                lines.append(f"plug-in metric {metric_id!r}{where}: {reason}")
    return list(dict.fromkeys(lines))
