"""Plug-in metrics (entry-point group ``clgate.metrics``): computed after and apart from the built-ins,
aggregated over seeds like them, and a broken one is a null whose reason names it — never a changed
built-in, never a pass."""

from __future__ import annotations

import math

import numpy as np
import pytest

from clgate.metrics import compute_metrics, compute_runs, metric_ids, metric_info
from clgate.metrics.plugins import FAILED, MetricInputs
from clgate.metrics.registry import found_plugins, is_builtin, plugin_registry
from clgate.policy import decide, parse_policy
from clgate.policy.plugins import plugin_warnings
from clgate.schemas import EvaluationLog

TASKS = [[0, 1], [2, 3]]


def _log(seed: int = 0, meta: dict | None = None) -> EvaluationLog:
    rng = np.random.default_rng(seed)
    points = []
    for it, (task, end) in enumerate([(1, False), (1, True), (2, False), (2, True)], start=1):
        total = [20, 20, 20 if task == 2 else 0, 20 if task == 2 else 0]
        correct = [int(rng.integers(0, n + 1)) for n in total]
        points.append(
            {"iteration": 10 * it, "task": task, "task_end": end, "correct": correct, "total": total}
        )
    return EvaluationLog.parse(
        {
            "tasks": TASKS,
            "class_names": ["ok", "crack", "dent", "smudge"],
            "points": points,
            "meta": {"seed": seed, **(meta or {})},
        }
    )


def _reference_cost_weighted(log: EvaluationLog, costs: dict[str, float]) -> list[float]:
    """Independent: at each task end, Σ cost·acc / Σ cost over the classes of the tasks so far."""
    names = log.class_names
    out = []
    ends = [p for p in log.points if p.task_end]
    for k, p in enumerate(ends):
        seen = [c for t in log.tasks[: k + 1] for c in t]
        w = [costs.get(names[c], 1.0) for c in seen]
        acc = [p.correct[c] / p.total[c] for c in seen]
        out.append(sum(a * x for a, x in zip(acc, w, strict=True)) / sum(w))
    return out


def _builtins(result) -> dict:
    return {k: v for k, v in result.metrics.items() if is_builtin(k)}


def test_the_example_metric_matches_a_reference_and_leaves_the_builtins_alone(plugins_on, example_site):
    log = _log(3, meta={"class_costs": {"crack": 10, "smudge": 0.5}})
    without = compute_metrics(log)
    plugins_on(example_site)
    assert "cost_weighted_acc" in plugin_registry() and metric_ids()[-1] == "cost_weighted_acc"
    info = metric_info("cost_weighted_acc")
    assert info.origin is not None and info.origin.distribution == "clgate-example-metrics"
    assert info.shape == "per_task" and info.higher_is_better and info.range == (0.0, 1.0)
    result = compute_metrics(log)
    assert result.metrics["cost_weighted_acc"] == pytest.approx(
        _reference_cost_weighted(log, {"crack": 10, "smudge": 0.5})
    )
    assert _builtins(result) == without.metrics
    assert result.evidence["cost_weighted_acc"][-1]["class_name"] in log.class_names
    assert plugin_warnings(result) == []


def test_several_seeds_aggregate_a_plugin_metric_like_a_builtin(plugins_on, example_site):
    plugins_on(example_site)
    logs = [_log(s) for s in (1, 2, 3)]
    runs = compute_runs(logs)
    finals = [compute_metrics(x).metrics["cost_weighted_acc"][-1] for x in logs]
    agg = runs.aggregates["cost_weighted_acc"]
    assert agg.worst[-1] == pytest.approx(min(finals))  # higher is better: the worst is the lowest
    assert agg.mean[-1] == pytest.approx(sum(finals) / 3)
    assert agg.std[-1] == pytest.approx(float(np.std(finals, ddof=1)))


def test_a_policy_gates_on_a_plugin_metric_pass_and_fail(plugins_on, example_site):
    plugins_on(example_site)
    log = _log(4)
    value = compute_metrics(log).metrics["cost_weighted_acc"][-1]
    for floor, verdict in ((value - 0.01, "PASS"), (value + 0.01, "FAIL")):
        policy = parse_policy(
            {"name": "p", "rules": [{"metric": "cost_weighted_acc", "floor": round(floor, 4)}]}
        )
        decision = decide([log], policy)
        assert decision.verdict == verdict, decision.summary
        assert decision.headline.plugins == {"cost_weighted_acc": pytest.approx(value)}


def test_policy_checks_apply_to_plugin_ids(plugins_on, example_site):
    plugins_on(example_site)
    with pytest.raises(Exception, match=r"rules\[0\].floor: 80 is outside the range of cost_weighted_acc"):
        parse_policy({"name": "p", "rules": [{"metric": "cost_weighted_acc", "floor": 80}]})
    with pytest.raises(Exception, match="did you mean 'cost_weighted_acc'"):
        parse_policy({"name": "p", "rules": [{"metric": "cost_weighted_ac", "floor": 0.5}]})


def test_without_plugins_the_id_is_unknown(monkeypatch, plugins_on, example_site):
    monkeypatch.setenv("CLGATE_PLUGINS", "off")
    plugins_on(example_site)
    monkeypatch.setenv("CLGATE_PLUGINS", "off")  # plugins_on clears it first
    from tests.plugins.conftest import reload_all

    reload_all()
    assert plugin_registry() == {}
    with pytest.raises(KeyError, match="unknown metric id 'cost_weighted_acc'"):
        metric_info("cost_weighted_acc")


SCALAR = """
from clgate.metrics.plugins import MetricPlugin
from clgate.metrics.steps import Outcome
import numpy as np

def make(name, fn, shape="scalar", rng=(0.0, 1.0)):
    return MetricPlugin(id=name, name=name, description="test", shape=shape, higher_is_better=True,
                        range=rng, compute=fn)

def boom(inputs):
    raise RuntimeError("disk on fire")

def poke(inputs):
    inputs.R[0, 0] = 0.0  # read-only: raises
    return 0.5

BOOM = make("boom", boom)
NAN = make("nan_metric", lambda i: float("nan"))
INF = make("inf_metric", lambda i: float("inf"))
HIGH = make("high_metric", lambda i: 1.5)
TEXT = make("text_metric", lambda i: "0.5")
SHORT = make("short_metric", lambda i: [0.5], shape="per_task")
POKE = make("poke", poke)
GOOD = make("good", lambda i: float(np.nanmean(i.r[i.finished_tasks - 1])))
SHADOW = make("mica", lambda i: 1.0)
WINDOW = make("wf5", lambda i: 0.0)
MISNAMED = make("other_name", lambda i: 0.5)
NOT_A_PLUGIN = object()
BAD_EVIDENCE = make("bad_evidence", lambda i: Outcome(0.5, evidence=object()))
LIST_EVIDENCE = make("list_evidence", lambda i: Outcome(0.5, evidence=[{"a": 1}]))
NUMPY_EVIDENCE = make("numpy_evidence", lambda i: Outcome(np.float64(0.5), evidence={"v": np.float64(0.5)}))
"""


@pytest.fixture
def broken_site(make_plugin):
    return make_plugin(
        "broken-metrics",
        SCALAR,
        metrics={
            "boom": "broken_metrics:BOOM",
            "nan_metric": "broken_metrics:NAN",
            "inf_metric": "broken_metrics:INF",
            "high_metric": "broken_metrics:HIGH",
            "text_metric": "broken_metrics:TEXT",
            "short_metric": "broken_metrics:SHORT",
            "poke": "broken_metrics:POKE",
            "good": "broken_metrics:GOOD",
            "mica": "broken_metrics:SHADOW",
            "wf5": "broken_metrics:WINDOW",
            "misnamed": "broken_metrics:MISNAMED",
            "not_a_plugin": "broken_metrics:NOT_A_PLUGIN",
            "missing_module": "no_such_module_xyz:THING",
            "BadId": "broken_metrics:GOOD",
            "bad_evidence": "broken_metrics:BAD_EVIDENCE",
            "list_evidence": "broken_metrics:LIST_EVIDENCE",
            "numpy_evidence": "broken_metrics:NUMPY_EVIDENCE",
        },
    )


@pytest.mark.parametrize(
    ("metric_id", "why"),
    [
        pytest.param("boom", "raised RuntimeError: disk on fire", id="raises"),
        pytest.param("inf_metric", "returned an infinite value", id="infinite"),
        pytest.param("high_metric", "returned 1.5, outside its declared range [0, 1]", id="out-of-range"),
        pytest.param("text_metric", "returned a str, not a number", id="wrong-type"),
        pytest.param(
            "short_metric", "returned 1 values; a per-task metric has one per task (2)", id="length"
        ),
        pytest.param("poke", "raised ValueError: assignment destination is read-only", id="writes-inputs"),
        pytest.param(
            "misnamed", "declares id 'other_name' but its entry point is named 'misnamed'", id="misnamed"
        ),
        pytest.param(
            "not_a_plugin", "is a object, not a clgate.metrics.plugins.MetricPlugin", id="wrong-object"
        ),
        pytest.param("missing_module", "cannot be loaded: ModuleNotFoundError", id="import-error"),
        pytest.param("bad_evidence", "returned evidence that is not JSON data", id="evidence-not-json"),
        pytest.param("list_evidence", "returned evidence that is not an object", id="evidence-shape"),
    ],
)
def test_a_broken_plugin_is_a_named_null_and_changes_no_builtin(plugins_on, broken_site, metric_id, why):
    log = _log(5)
    without = compute_metrics(log)
    plugins_on(broken_site)
    result = compute_metrics(log)
    value = result.metrics[metric_id]
    assert value is None or value == [None, None]
    reason = result.reasons[metric_id]
    assert reason.startswith(FAILED) and why in reason
    assert "broken-metrics 1.0" in reason and f"clgate.metrics:{metric_id} = " in reason
    assert _builtins(result) == without.metrics  # every built-in unchanged
    assert result.metrics["good"] == pytest.approx(float(np.nanmean(without.metrics["acc"][-1])))
    assert any(metric_id in line and why.split(":")[0] in line for line in plugin_warnings(result))


def test_nan_is_undefined_not_a_failure(plugins_on, broken_site):
    plugins_on(broken_site)
    result = compute_metrics(_log(6))
    assert result.metrics["nan_metric"] is None
    assert result.reasons["nan_metric"] == "undefined for this log"
    # numpy numbers are numbers: value and evidence come out as plain JSON
    assert result.metrics["numpy_evidence"] == 0.5 and result.evidence["numpy_evidence"] == {"v": 0.5}
    result.model_dump_json()


def test_builtin_ids_and_bad_ids_are_refused_named(plugins_on, broken_site):
    log = _log(7)
    mica = compute_metrics(log).metrics["mica"]
    plugins_on(broken_site)
    found = found_plugins()
    assert "mica" not in found.metrics and "wf5" not in found.metrics and "BadId" not in found.metrics
    refused = "\n".join(found.refused)
    assert "'mica' is a built-in metric id" in refused and "'wf5' is a built-in metric id" in refused
    assert "'BadId' is not a lowercase identifier" in refused and "broken-metrics 1.0" in refused
    assert compute_metrics(log).metrics["mica"] == mica
    assert metric_info("mica").origin is None


def test_a_gate_on_a_broken_metric_is_error_and_other_policies_are_unaffected(plugins_on, broken_site):
    log = _log(8)
    plugins_on(broken_site)
    on_broken = parse_policy(
        {"name": "p", "rules": [{"metric": "boom", "floor": 0.0}, {"metric": "acc", "floor": 0.0}]}
    )
    decision = decide([log], on_broken)
    assert decision.verdict == "ERROR"
    assert decision.rules[0].status == "error" and "disk on fire" in decision.rules[0].message
    assert decision.rules[1].status == "pass"
    for rule in ({"metric": "missing_module", "floor": 0.0}, {"metric": "nan_metric", "ceiling": 1.0}):
        assert decide([log], parse_policy({"name": "p", "rules": [rule]})).verdict == "ERROR"
    plain = parse_policy({"name": "p", "rules": [{"metric": "acc", "floor": 0.0}]})
    assert decide([log], plain).verdict == "PASS"


def test_two_distributions_with_one_id_are_both_refused(plugins_on, make_plugin):
    source = """
from clgate.metrics.plugins import MetricPlugin
DUP = MetricPlugin(id="dup", name="d", description="d", shape="scalar", higher_is_better=True,
                   range=(0.0, 1.0), compute=lambda i: 0.5)
"""
    a = make_plugin("dist-a", source, metrics={"dup": "dist_a:DUP"})
    b = make_plugin("dist-b", source, metrics={"dup": "dist_b:DUP"})
    plugins_on(a, b)
    reason = compute_metrics(_log(9)).reasons["dup"]
    assert "declared twice" in reason and "dist-a 1.0" in reason and "dist-b 1.0" in reason


def test_inputs_are_read_only():
    inputs = MetricInputs.example()
    for name in ("R", "r", "class_acc", "correct", "total", "task_acc", "class_task"):
        assert not getattr(inputs, name).flags.writeable, name
    with pytest.raises(TypeError):
        inputs.meta["x"] = 1  # type: ignore[index]
    assert math.isclose(inputs.R[1, 1], 0.9)


def test_a_baseline_rule_on_a_plugin_metric(plugins_on, example_site):
    plugins_on(example_site)
    candidate, baseline = _log(10), _log(11)
    c = compute_metrics(candidate).metrics["cost_weighted_acc"][-1]
    b = compute_metrics(baseline).metrics["cost_weighted_acc"][-1]
    drop = b - c  # higher is better: the drop is baseline minus candidate
    assert drop > 0.05  # these seeds: the candidate is worse
    for max_drop, verdict in ((drop + 0.01, "PASS"), (drop - 0.01, "FAIL")):
        rule = {"baseline": "cost_weighted_acc", "max_drop": round(max_drop, 4)}
        decision = decide([candidate], parse_policy({"name": "p", "rules": [rule]}), baseline=baseline)
        assert decision.verdict == verdict, decision.summary
        assert decision.rules[0].value == pytest.approx(drop)
