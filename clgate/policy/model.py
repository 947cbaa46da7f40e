"""Loading a policy: the structure from ``clgate.schemas.policy`` plus the checks that need the metric
registry."""

from __future__ import annotations

import difflib
import json
import math
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError, model_validator

from clgate.documents import parse_document, read_text
from clgate.metrics import REGISTRY, metric_info
from clgate.metrics.plugins import plugin_code, raised
from clgate.metrics.registry import plugin_registry
from clgate.policy.plugins import rule_kinds, validate_rule
from clgate.schemas.errors import InputError, problems_of, validate
from clgate.schemas.policy import PLUGIN_TAG, RULE_TAGS, BaselineRule, MetricRule, PluginRule
from clgate.schemas.policy import Policy as PolicySchema

# Metrics that have a lower-confidence-bound counterpart computed by clgate.metrics.
LCB_METRICS = {"mica": "mica_lcb"}
_WINDOWED = re.compile(r"^w[fp](\d+)$")


class PolicyError(InputError):
    """A policy that cannot be used; ``problems`` lists one ``path: reason`` line each."""

    what = "policy"


def _suggest(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _range_problem(where: str, value: float, metric: str, info: Any) -> str | None:
    lo, hi = getattr(info, "range", None) or (None, None)
    lo = -math.inf if lo is None else lo
    hi = math.inf if hi is None else hi
    if lo <= value <= hi:
        return None
    hint = " (accuracies are fractions in [0, 1])" if hi == 1 and value > 1 else ""
    return f"{where}: {value:g} is outside the range of {metric} [{lo:g}, {hi:g}]{hint}"


def registry_problems(policy: PolicySchema) -> list[str]:
    """Problems the structure cannot see: unknown metric ids, ``at`` on scalars, out-of-range thresholds."""
    known = sorted([*REGISTRY, *plugin_registry()])
    problems: list[str] = []
    for i, rule in enumerate(policy.rules):
        if isinstance(rule, PluginRule):
            problems += plugin_rule_problems(rule, f"rules[{i}]")
            continue
        if isinstance(rule, MetricRule):
            field, metric = "metric", rule.metric
        elif isinstance(rule, BaselineRule):
            if rule.baseline == "classes":
                continue
            field, metric = "baseline", rule.baseline
        else:
            continue
        where = f"rules[{i}]"
        try:
            info = metric_info(metric)
        except KeyError:
            choices = [*known, "classes"] if field == "baseline" else known
            problems.append(f"{where}.{field}: unknown metric id {metric!r}{_suggest(metric, choices)}")
            continue
        if info.shape == "scalar" and rule.at != "final":
            problems.append(
                f"{where}.at: {metric} is a scalar; 'at: {rule.at}' applies to per-task metrics only"
            )
        if isinstance(rule, MetricRule):
            if rule.bound == "wilson95" and metric not in LCB_METRICS:
                problems.append(
                    f"{where}.bound: wilson95 is available for {', '.join(sorted(LCB_METRICS))} "
                    f"and per-class rules, not {metric} (the worst class on its bound: "
                    '{classes: "*", at: final | min_after_learned, bound: wilson95})'
                )
            for name in ("floor", "ceiling"):
                value = getattr(rule, name)
                if value is not None:
                    p = _range_problem(f"{where}.{name}", value, metric, info)
                    if p:
                        problems.append(p)
    return problems


def plugin_rule_problems(rule: PluginRule, where: str) -> list[str]:
    """A plug-in kind's fields, validated by its plug-in's model; an unknown kind is refused. A broken
    plug-in's kind loads (its rules are judged ``error``, naming the plug-in)."""
    kinds = rule_kinds().kinds
    found = kinds.get(rule.kind)
    if found is None:
        builtin = "built-in rules are recognised by their key (metric, classes, baseline, fmeca)"
        loaded = (
            f"; installed plug-in kinds: {', '.join(kinds)}" if kinds else "; no plug-in kind is installed"
        )
        hint = _suggest(rule.kind, list(kinds))
        return [f"{where}.kind: unknown rule kind {rule.kind!r}{hint} ({builtin}{loaded})"]
    if found.judge is None:
        return []
    try:
        with plugin_code():
            validate_rule(found.judge, rule)
    except ValidationError as exc:
        return problems_of(exc, prefix=where)
    except Exception as exc:  # a validator that raises what pydantic does not wrap: the plug-in's, named
        return [
            f"{where}: plug-in rule kind {rule.kind!r} ({found.origin}) raised {raised(exc)} validating it"
        ]
    return []


class Policy(PolicySchema):
    """A validated policy (``clgate.policy/v1``): the schema plus registry checks.

    >>> p = Policy.model_validate({"name": "demo", "rules": [{"metric": "mica", "floor": 0.5}]})
    >>> p.rules[0].at, p.rules[0].over_runs, p.rules[0].severity
    ('final', 'worst', 'block')
    """

    @model_validator(mode="after")
    def _check_registry(self) -> Policy:
        problems = registry_problems(self)
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def windows(self) -> tuple[int, ...]:
        """Windows for ``wf{w}``/``wp{w}`` that the rules need, with the defaults 10 and 100."""
        ws = {10, 100}
        for rule in self.rules:
            metric = getattr(rule, "metric", None) or getattr(rule, "baseline", None)
            m = _WINDOWED.match(metric or "")
            if m:
                ws.add(int(m.group(1)))
        return tuple(sorted(ws))

    def canonical_json(self) -> str:
        """Key-sorted JSON of the whole policy (defaults included): what the decision hashes. A policy
        without ``registry`` hashes as it did before that optional field existed."""
        unset = {"registry"} if self.registry is None else None
        return json.dumps(self.model_dump(mode="json", exclude=unset), sort_keys=True, separators=(",", ":"))


def parse_policy(data: dict[str, Any] | str | bytes, source: str | None = None) -> Policy:
    """Validate a policy given as a dict or YAML/JSON text; raises :class:`PolicyError`."""
    document = parse_document(data, PolicyError, source=source, fields="(name, rules, …)")
    return validate(Policy, document, PolicyError, source=source, tags={"rules": (*RULE_TAGS, PLUGIN_TAG)})


def load_policy(path: str | Path) -> Policy:
    """Read a ``.yaml``/``.yml``/``.json`` policy; raises :class:`PolicyError` naming the rule and field."""
    path = Path(path)
    return parse_policy(read_text(path, PolicyError), source=str(path))
