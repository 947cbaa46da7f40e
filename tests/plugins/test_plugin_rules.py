"""Plug-in rule kinds (entry-point group ``clgate.rules``): validated with the plug-in's model when the
policy loads, judged like a built-in kind, and a broken one is ``error`` naming it — never a pass."""

from __future__ import annotations

import pytest

from clgate.policy import PolicyError, decide, parse_policy, policy_hash
from clgate.policy.judges import JUDGES
from clgate.policy.plugins import plugin_warnings, rule_kinds
from clgate.schemas import EvaluationLog


def _log(seed: int, correct: list[int]) -> EvaluationLog:
    """Two tasks of two classes (a, b | c, d), 10 test samples each; ``correct`` at the last task end."""
    return EvaluationLog.parse(
        {
            "tasks": [[0, 1], [2, 3]],
            "class_names": ["a", "b", "c", "d"],
            "meta": {"seed": seed},
            "points": [
                {
                    "iteration": 1,
                    "task": 1,
                    "task_end": True,
                    "correct": [9, 9, 0, 0],
                    "total": [10, 10, 0, 0],
                },
                {"iteration": 2, "task": 2, "task_end": True, "correct": correct, "total": [10] * 4},
            ],
        }
    )


def _group(floor: float, **extra) -> dict:
    return {
        "name": "p",
        "rules": [{"kind": "class_group_mean", "group": "g", "classes": ["a", 3], "floor": floor, **extra}],
    }


def test_the_example_kind_judges_like_a_builtin(plugins_on, example_site):
    plugins_on(example_site)
    judge = rule_kinds().kinds["class_group_mean"].judge
    assert judge is not None and "class_group_mean" not in JUDGES
    runs = [_log(0, [8, 1, 1, 6]), _log(1, [6, 1, 1, 4])]  # group {a, d}: means 0.7 and 0.5
    passed = decide(runs, parse_policy(_group(0.5)))
    assert passed.verdict == "PASS", passed.summary
    rule = passed.rules[0]
    assert (rule.kind, rule.value, rule.threshold, rule.comparison) == ("class_group_mean", 0.5, 0.5, ">=")
    assert rule.evidence == {"seed": 1, "run": 1, "group": "g"} and rule.metric == "group g"
    assert rule.id == "group g mean >= 0.5"
    assert decide(runs, parse_policy(_group(0.6))).verdict == "FAIL"
    assert decide(runs, parse_policy(_group(0.6, over_runs="mean"))).verdict == "PASS"  # mean 0.6
    warned = decide(runs, parse_policy(_group(0.6, severity="warn")))
    assert warned.verdict == "WARN" and warned.rules[0].status == "warn"
    named = decide(runs, parse_policy(_group(0.6, id="defects")))
    assert named.rules[0].id == "defects"


def test_a_plugin_rule_is_validated_by_its_model(plugins_on, example_site):
    plugins_on(example_site)
    with pytest.raises(PolicyError) as exc:
        parse_policy(
            {"name": "p", "rules": [{"kind": "class_group_mean", "group": "g", "classes": [], "floor": 2}]}
        )
    text = str(exc.value)
    assert "rules[0].classes: name at least one class" in text
    assert "rules[0].floor: Input should be less than or equal to 1" in text
    with pytest.raises(PolicyError, match=r"rules\[0\].unknown: Extra inputs are not permitted"):
        parse_policy(_group(0.5, unknown=1))
    with pytest.raises(
        PolicyError, match=r"unknown rule kind 'nope'.*installed plug-in kinds: class_group_mean"
    ):
        parse_policy({"name": "p", "rules": [{"kind": "nope", "floor": 0.5}]})
    # the plug-in's fields are part of the policy (and of its hash)
    assert policy_hash(parse_policy(_group(0.5))) != policy_hash(parse_policy(_group(0.6)))


def test_an_unknown_class_is_an_error_not_a_pass(plugins_on, example_site):
    plugins_on(example_site)
    policy = parse_policy(
        {"name": "p", "rules": [{"kind": "class_group_mean", "group": "g", "classes": ["zz"], "floor": 0.0}]}
    )
    decision = decide([_log(0, [1, 1, 1, 1])], policy)
    assert decision.verdict == "ERROR" and "no class 'zz' in the log" in decision.rules[0].message


def test_without_the_plugin_the_kind_is_refused(plugins_on):
    plugins_on()
    with pytest.raises(
        PolicyError, match=r"unknown rule kind 'class_group_mean'.*no plug-in kind is installed"
    ):
        parse_policy(_group(0.5))


BROKEN = """
from typing import Literal
from clgate.policy.judges import Judge, Judged, RuleError
from clgate.schemas.policy import RuleBase

def model(kind):
    return type(f"M_{kind}", (RuleBase,), {"__annotations__": {"kind": Literal[kind]}})

def raises(rule, runs, inputs):
    raise KeyError("oops")

def nan(rule, runs, inputs):
    return Judged(float("nan"), 0.5, ">=", float("nan"), {}, "nan")

def refuses(rule, runs, inputs):
    raise RuleError("needs a thing")

def wrong(rule, runs, inputs):
    return 0.9

def bad_evidence(rule, runs, inputs):
    return Judged(0.9, 0.5, ">=", 0.4, {"x": object()}, "fine")

RAISES = Judge("raises", model("raises"), subject=lambda r: "x", judge=raises)
NAN = Judge("nan_kind", model("nan_kind"), subject=lambda r: "x", judge=nan)
REFUSES = Judge("refuses", model("refuses"), subject=lambda r: "x", judge=refuses)
WRONG = Judge("wrong", model("wrong"), subject=lambda r: "x", judge=wrong)
MISMATCH = Judge("other", model("other"), subject=lambda r: "x", judge=wrong)
NOT_A_JUDGE = 42
BAD_EVIDENCE = Judge("bad_evidence", model("bad_evidence"), subject=lambda r: "x", judge=bad_evidence)
SHADOW = Judge("metric", model("metric"), subject=lambda r: "x", judge=wrong)
"""


@pytest.fixture
def broken_kinds(make_plugin):
    return make_plugin(
        "broken-rules",
        BROKEN,
        rules={
            "raises": "broken_rules:RAISES",
            "nan_kind": "broken_rules:NAN",
            "refuses": "broken_rules:REFUSES",
            "wrong": "broken_rules:WRONG",
            "mismatch": "broken_rules:MISMATCH",
            "not_a_judge": "broken_rules:NOT_A_JUDGE",
            "gone": "no_module_here_xyz:JUDGE",
            "metric": "broken_rules:SHADOW",
            "bad_evidence": "broken_rules:BAD_EVIDENCE",
        },
    )


@pytest.mark.parametrize(
    ("kind", "why"),
    [
        pytest.param("raises", "raised KeyError: 'oops'", id="raises"),
        pytest.param("nan_kind", "without a finite value", id="nan"),
        pytest.param("wrong", "answered float without a finite value", id="wrong-type"),
        pytest.param("refuses", "cannot evaluate: needs a thing", id="rule-error"),
        pytest.param(
            "mismatch", "its Judge has kind 'other' but its entry point is named 'mismatch'", id="mismatch"
        ),
        pytest.param("not_a_judge", "is a int, not a clgate.policy.judges.Judge", id="not-a-judge"),
        pytest.param("gone", "cannot be loaded: ModuleNotFoundError", id="import-error"),
        pytest.param("bad_evidence", "returned evidence that is not JSON data", id="evidence-not-json"),
    ],
)
def test_a_broken_kind_is_an_error_naming_the_plugin(plugins_on, broken_kinds, kind, why):
    plugins_on(broken_kinds)
    policy = parse_policy({"name": "p", "rules": [{"kind": kind}, {"metric": "acc", "floor": 0.0}]})
    decision = decide([_log(0, [5, 5, 5, 5])], policy)
    assert decision.verdict == "ERROR"
    result = decision.rules[0]
    assert result.status == "error" and result.passed is None and why in result.message
    if kind != "refuses":
        assert "broken-rules 1.0" in result.message and f"clgate.rules:{kind} = " in result.message
    assert decision.rules[1].status == "pass"  # the other rule is judged as without the plug-in


def test_a_builtin_kind_cannot_be_replaced(plugins_on, broken_kinds):
    plugins_on(broken_kinds)
    assert "metric" not in rule_kinds().kinds
    assert any("'metric' is a built-in rule kind" in line for line in plugin_warnings())
    decision = decide(
        [_log(0, [5, 5, 5, 5])], parse_policy({"name": "p", "rules": [{"metric": "acc", "floor": 0.4}]})
    )
    assert decision.verdict == "PASS" and decision.rules[0].kind == "metric"
