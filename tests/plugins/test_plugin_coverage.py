"""The registry's coverage checks (``tests/metrics/test_registry.py``, ``tests/policy/test_judges.py``) hold
for installed plug-ins too: every plug-in metric is a well-formed registry entry, computed and exported
(``metric_ids``, ``clgate metrics``, the headline, its gauge) when its needs are met, and every plug-in
rule kind reaches its judge from a policy. The example package's ids are documented in docs/metrics.md
and docs/gate.md."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

from clgate.metrics import compute_metrics, metric_ids
from clgate.metrics.registry import NEEDS, plugin_registry
from clgate.policy import decide, parse_policy
from clgate.policy.plugins import rule_kinds
from clgate.schemas import EvaluationLog
from clgate.service.metrics import headline_gauges

DOCS = Path(__file__).resolve().parents[2] / "docs"
LOG = EvaluationLog.parse(
    {
        "tasks": [[0, 1], [2]],
        "class_names": ["a", "b", "c"],
        "points": [
            {"iteration": 1, "task": 1, "task_end": True, "correct": [9, 8, 0], "total": [10, 10, 0]},
            {"iteration": 2, "task": 2, "task_end": True, "correct": [5, 7, 9], "total": [10, 10, 10]},
        ],
    }
)


def test_every_plugin_metric_is_well_formed_computed_and_exported(plugins_on, example_site):
    plugins_on(example_site)
    infos = plugin_registry()
    assert infos, "the example package provides a metric"
    result = compute_metrics(LOG)
    policy = parse_policy({"name": "p", "rules": [{"metric": next(iter(infos)), "floor": 0.0}]})
    headline = decide([LOG], policy).headline
    gauges = {key for key, _, _ in headline_gauges()}
    for metric_id, info in infos.items():
        assert info.origin is not None and info.origin.name == metric_id
        assert info.shape in ("per_task", "scalar") and info.range[0] < info.range[1]
        assert info.needs <= NEEDS and info.name and info.description and info.source
        assert metric_id in metric_ids() and metric_id in result.metrics
        value = result.metrics[metric_id]
        assert value is not None and value != [None, None], result.reasons.get(metric_id)
        assert metric_id in headline.plugins
        assert (info.gauge is not None) == (metric_id in gauges)


def test_every_plugin_rule_kind_reaches_its_judge(plugins_on, example_site):
    plugins_on(example_site)
    kinds = rule_kinds().kinds
    assert kinds, "the example package provides a rule kind"
    for kind, loaded in kinds.items():
        assert loaded.judge is not None and loaded.judge.kind == kind
        assert loaded.judge.rule_type.model_fields["kind"].annotation.__args__ == (kind,)


def test_the_example_ids_are_documented(plugins_on, example_site):
    plugins_on(example_site)
    metrics_doc = (DOCS / "metrics.md").read_text(encoding="utf-8")
    gate_doc = (DOCS / "gate.md").read_text(encoding="utf-8")
    for metric_id in plugin_registry():
        assert f"`{metric_id}`" in metrics_doc, metric_id
    for kind in rule_kinds().kinds:
        assert f"`{kind}`" in gate_doc, kind


def test_the_example_packages_docstring_examples_hold(plugins_on, example_site):
    plugins_on(example_site)
    for name in ("clgate_example_metrics.metrics", "clgate_example_metrics.rules"):
        result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
        assert result.failed == 0, name
    assert doctest.testmod(importlib.import_module("clgate_example_metrics.metrics")).attempted
