"""Every rule kind of the policy schema has exactly one judge in the table, and every judge a kind
(scikit-learn's ``test_common`` idea: a new kind without a judge, or a judge nobody can reach, fails).
Plug-in kinds share one schema model (``PluginRule``) and get their judge from their plug-in; that every
installed plug-in kind reaches its judge is tested in ``tests/plugins``."""

from __future__ import annotations

import typing

import pytest

from clgate.policy.judges import JUDGES
from clgate.schemas.policy import RULE_TAGS, PluginRule, Rule


def _schema_rule_models() -> list[type]:
    """The built-in models of the ``Rule`` union (``Annotated[Annotated[Model, Tag(kind)] | …, …]``)."""
    union = typing.get_args(Rule)[0]
    return [m for member in typing.get_args(union) if (m := typing.get_args(member)[0]) is not PluginRule]


def test_plugin_kinds_have_one_schema_model():
    union = typing.get_args(Rule)[0]
    assert [typing.get_args(m)[0] for m in typing.get_args(union)].count(PluginRule) == 1
    assert not set(JUDGES) & {"plugin"}


def _kind_of(model: type) -> str:
    return model.model_fields["kind"].default  # type: ignore[attr-defined]


def test_the_schema_lists_its_rule_models():
    models = _schema_rule_models()
    assert len(models) == len(RULE_TAGS) >= 4
    assert sorted(_kind_of(m) for m in models) == sorted(RULE_TAGS)


def test_every_rule_kind_has_a_judge_and_every_judge_a_kind():
    assert sorted(JUDGES) == sorted(RULE_TAGS)


@pytest.mark.parametrize("model", _schema_rule_models(), ids=_kind_of)
def test_each_judge_judges_the_model_of_its_kind(model):
    judge = JUDGES[_kind_of(model)]
    assert judge.kind == _kind_of(model)
    assert judge.rule_type is model


@pytest.mark.parametrize(
    "rule",
    [
        pytest.param({"metric": "acc", "floor": 0.5}, id="metric"),
        pytest.param({"classes": "*", "floor": 0.5}, id="class"),
        pytest.param({"baseline": "acc", "max_drop": 0.1}, id="baseline"),
        pytest.param({"fmeca": "rpn", "limit": 1000}, id="fmeca"),
    ],
)
def test_each_kind_reaches_its_judge(rule, policy_of, judge, make_result):
    """A rule of each kind gets a result from its own judge (no kind falls through to another)."""
    run = make_result({"acc": 0.9}, classes=[{"final_accuracy": 0.9, "min_after_learned": 0.8}] * 2)
    result = judge(rule, [run], baseline=run, fmeca={"default_severity": 5})
    kind = policy_of(rule).rules[0].kind
    assert result.kind == kind
    assert result.status == "pass", result.message
    assert result.metric == JUDGES[kind].subject(policy_of(rule).rules[0])
