"""scikit-learn ``test_common`` style: every registered metric is documented, exported, honest about
its needs, and covered by the reference tests."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

import clgate.metrics as M
from clgate.metrics import (
    REGISTRY,
    WINDOWED,
    compute_metrics,
    compute_runs,
    metric_ids,
    metric_info,
)
from clgate.metrics.registry import NEEDS, plugin_registry
from clgate.schemas import EvaluationLog

DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
ALL_IDS = [*REGISTRY, "wf{w}", "wp{w}"]
FULL_OPTIONS = {"task_accuracy": "macro", "windows": (3, 10)}


@pytest.fixture(scope="module")
def full_doc(make_log):
    """A log that meets every need: counts, future tasks, resources, between-task points."""
    return make_log(5, sizes=[2, 3, 1, 2], future=True, max_between=5)


@pytest.fixture(scope="module")
def baseline_doc(make_log, full_doc):
    return make_log(6, tasks=full_doc["tasks"], future=True)


def test_registry_entries_are_well_formed():
    # installed plug-ins too (none in the repository's venv; tests/plugins installs the example package)
    for info in [*REGISTRY.values(), *WINDOWED.values(), *plugin_registry().values()]:
        assert info.shape in ("per_task", "scalar"), info.id
        assert info.range[0] < info.range[1], info.id
        assert info.needs <= NEEDS, info.id
        assert info.source and info.name and info.description, info.id
        assert isinstance(info.higher_is_better, bool)


@pytest.mark.parametrize("metric_id", ALL_IDS)
def test_every_metric_is_documented(metric_id):
    text = DOCS.read_text(encoding="utf-8")
    heading = re.search(rf"^#+ .*`{re.escape(metric_id)}`", text, flags=re.MULTILINE)
    assert heading, f"docs/metrics.md has no heading for `{metric_id}`"
    info = metric_info(metric_id.replace("{w}", "10"))
    assert info.source.split(",")[0].split(" (")[0] in text, f"source of {metric_id} not named in the docs"


@pytest.mark.parametrize("metric_id", ALL_IDS)
def test_every_metric_is_exported_and_computed_when_its_needs_are_met(metric_id, full_doc, baseline_doc):
    metric_id = metric_id.replace("{w}", "10")
    log, base = EvaluationLog.parse(full_doc), EvaluationLog.parse(baseline_doc)
    if metric_id == "cl_stability":
        result = compute_runs([log, base], baseline=base, **FULL_OPTIONS)
        value = result.metrics[metric_id]
    else:
        result = compute_metrics(log, baseline=base, **FULL_OPTIONS)
        value = result.metrics[metric_id]
        shape = "per_task" if isinstance(value, list) else "scalar"
        assert shape == metric_info(metric_id).shape
    assert value is not None and value != [None] * len(full_doc["tasks"]), metric_id
    assert metric_id in metric_ids((3, 10))


@pytest.mark.parametrize("need", sorted(NEEDS - {"continual"}))
def test_a_metric_whose_hard_need_is_missing_is_null_with_a_reason(need, full_doc, baseline_doc):
    doc = copy.deepcopy(full_doc)
    baseline = EvaluationLog.parse(baseline_doc)
    if need == "counts":
        for p in doc["points"]:
            p["accuracy"] = [
                k / n if n else None for k, n in zip(p.pop("correct"), p.pop("total"), strict=True)
            ]
    elif need == "future_tasks":
        for p in doc["points"]:
            seen = {c for t in doc["tasks"][: p["task"]] for c in t}
            p["total"] = [n if c in seen else 0 for c, n in enumerate(p["total"])]
            p["correct"] = [k if c in seen else 0 for c, k in enumerate(p["correct"])]
    elif need == "resources":
        doc.pop("resources")
    elif need == "baseline":
        baseline = None
    result = compute_metrics(EvaluationLog.parse(doc), baseline=baseline, **FULL_OPTIONS)
    for metric_id, value in result.metrics.items():
        info = metric_info(metric_id)
        null = value is None or value == [None] * len(doc["tasks"])
        if need in info.hard_needs or (need == "runs" and metric_id == "cl_stability"):
            assert null and result.reasons[metric_id], metric_id
        elif not (info.hard_needs & {"runs"}):
            assert not null, f"{metric_id} became null without {need}"


def test_reference_covers_the_registry(make_log, reference):
    produced = reference(make_log(2, future=True), windows=(10,))
    assert set(metric_ids((10,))) <= set(produced)


def test_public_api_is_exported():
    for name in (
        "LogArrays",
        "compute_metrics",
        "compute_runs",
        "REGISTRY",
        "MetricInfo",
        "metric_info",
        "wilson_interval",
    ):
        assert name in M.__all__ and hasattr(M, name)
    for name in M.__all__:
        assert getattr(M, name) is not None


@pytest.mark.parametrize("bad", ["accuracy", "wf1", "wf0", "wf01", "wp", "WF10", "wf10x", ""])
def test_unknown_ids_raise_a_clear_key_error(bad):
    with pytest.raises(KeyError, match="unknown metric id"):
        metric_info(bad)


def test_windowed_ids_resolve_for_any_window():
    for w in (2, 7, 25, 1000):
        assert metric_info(f"wf{w}").id == f"wf{w}" and not metric_info(f"wf{w}").higher_is_better
        assert metric_info(f"wp{w}").higher_is_better
