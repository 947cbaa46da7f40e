"""Loading policies: what is accepted, and what is rejected with the rule's position in the message."""

from __future__ import annotations

import json

import pytest

from clgate.policy import Policy, PolicyError, load_policy, parse_policy


def _problems(doc) -> list[str]:
    with pytest.raises(PolicyError) as info:
        parse_policy(doc)
    return info.value.problems


def _doc(*rules, **extra):
    return {"name": "p", "rules": list(rules), **extra}


def test_full_policy_yaml_loads(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(
        """
format: clgate.policy/v1
name: release
version: 2
description: every rule kind
rules:
  - {metric: acc, at: final, floor: 0.8}
  - {metric: mica, at: all, floor: 0.5, bound: wilson95, over_runs: mean}
  - {metric: min_acc, at: "task:2", floor: 0.3, severity: warn}
  - {metric: wf25, ceiling: 0.4}
  - {classes: [ant, 3], at: min_after_learned, floor: 0.2}
  - {classes: "*", floor: 0.1, bound: wilson95}
  - {baseline: mica, max_drop: 0.05, relative: true}
  - {baseline: classes, max_drop: 0.1}
  - {fmeca: priority, fail_at: Medium}
  - {fmeca: rpn, limit: 300, occurrence: final}
fmeca: {default_severity: 7, severity: {ant: 10, 3: 9}, default_detection: 4}
"""
    )
    p = load_policy(path)
    assert isinstance(p, Policy)
    assert p.version == "2"
    assert [r.kind for r in p.rules] == ["metric"] * 4 + ["class"] * 2 + ["baseline"] * 2 + ["fmeca"] * 2
    assert p.fmeca.severity == {"ant": 10, "3": 9}
    assert p.windows() == (10, 25, 100)


def test_json_policy_loads(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(_doc({"metric": "wamica", "floor": 0.5})))
    assert load_policy(path).rules[0].metric == "wamica"


def test_unknown_metric_names_the_rule_and_suggests():
    problems = _problems(
        _doc(
            {"metric": "acc", "floor": 0.5},
            {"metric": "acc", "floor": 0.5},
            {"metric": "acc", "floor": 0.5},
            {"metric": "mika", "floor": 0.5},
        )
    )
    assert problems == ["rules[3].metric: unknown metric id 'mika' (did you mean 'mica'?)"]


def test_unknown_baseline_metric():
    assert _problems(_doc({"baseline": "clases", "max_drop": 0.1})) == [
        "rules[0].baseline: unknown metric id 'clases' (did you mean 'classes'?)"
    ]


@pytest.mark.parametrize(
    "rule, expected",
    [
        pytest.param(
            {"metric": "acc", "floor": "high"}, "rules[0].floor: Input should be a valid number", id="text"
        ),
        pytest.param(
            {"metric": "acc", "floor": float("nan")},
            "rules[0].floor: Input should be a finite number",
            id="nan",
        ),
        pytest.param(
            {"metric": "acc", "floor": 80},
            "rules[0].floor: 80 is outside the range of acc [0, 1]",
            id="percent",
        ),
        pytest.param({"metric": "acc"}, "rules[0]: a metric rule needs a floor or a ceiling", id="none"),
        pytest.param(
            {"metric": "acc", "floor": 0.9, "ceiling": 0.5},
            "rules[0]: floor (0.9) is above ceiling",
            id="inverted",
        ),
        pytest.param(
            {"metric": "acc", "at": "task:0", "floor": 0.5},
            "rules[0].at: task:N counts tasks from 1",
            id="task0",
        ),
        pytest.param(
            {"metric": "acc", "at": "last", "floor": 0.5}, "rules[0].at: 'last' is not one of", id="bad-at"
        ),
        pytest.param(
            {"metric": "wamica", "at": "all", "floor": 0.5}, "rules[0].at: wamica is a scalar", id="scalar-at"
        ),
        pytest.param(
            {"metric": "acc", "bound": "wilson95", "floor": 0.5},
            "rules[0].bound: wilson95 is available for mica",
            id="bound",
        ),
        pytest.param(
            {"metric": "acc", "floor": 0.5, "over_runs": "best"},
            "rules[0].over_runs: Input should be 'mean' or 'worst'",
            id="over-runs",
        ),
        pytest.param(
            {"classes": [], "floor": 0.5}, "rules[0].classes: name at least one class", id="no-classes"
        ),
        pytest.param(
            {"classes": ["ant"], "floor": 1.5},
            "rules[0].floor: Input should be less than or equal to 1",
            id="class-floor",
        ),
        pytest.param(
            {"baseline": "mica", "max_drop": -0.1},
            "rules[0].max_drop: Input should be greater than or equal to 0",
            id="neg-drop",
        ),
        pytest.param({"fmeca": "rpn"}, "rules[0]: an rpn rule needs a limit", id="rpn-limit"),
        pytest.param(
            {"fmeca": "priority", "fail_at": "Low"},
            "rules[0].fail_at: Input should be 'High' or 'Medium'",
            id="fail-at",
        ),
        pytest.param(
            {"metric": "acc", "classes": ["ant"], "floor": 0.5},
            "rules[0]: a rule needs exactly one of the keys",
            id="two-kinds",
        ),
        pytest.param({"flor": 0.5}, "rules[0]: a rule needs exactly one of the keys", id="no-kind"),
        pytest.param(
            {"metric": "acc", "flor": 0.5, "floor": 0.5},
            "rules[0].flor: Extra inputs are not permitted",
            id="typo-key",
        ),
    ],
)
def test_malformed_rules_are_rejected_with_position(rule, expected):
    problems = _problems(_doc(rule))
    assert any(p.startswith(expected) for p in problems), problems


def test_fmeca_config_is_validated():
    problems = _problems(
        _doc(
            {"metric": "acc", "floor": 0.5},
            fmeca={
                "default_severity": 11,
                "occurrence_scale": [{"at_least": 0.01, "rating": 7}, {"at_least": 0.1, "rating": 10}],
            },
        )
    )
    assert any(
        p.startswith("fmeca.default_severity: Input should be less than or equal to 10") for p in problems
    )
    assert any(p.startswith("fmeca.occurrence_scale: Value error, row 1") or "row 1" in p for p in problems)


def test_empty_and_non_mapping_documents():
    assert _problems({"name": "p", "rules": []})[0].startswith("rules: List should have at least 1 item")
    assert _problems("- just\n- a list\n") == ["the document must be a mapping (name, rules, …)"]
    assert _problems("name: [unclosed\n")[0].startswith("not valid YAML/JSON")


def test_load_policy_names_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nrules:\n  - {metric: mika, floor: 0.5}\n")
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    assert str(info.value).startswith(f"{path}: invalid policy")
    with pytest.raises(PolicyError, match="cannot read file"):
        load_policy(tmp_path / "missing.yaml")


def test_model_validate_applies_registry_checks():
    with pytest.raises(ValueError, match="unknown metric id 'mika'"):
        Policy.model_validate(_doc({"metric": "mika", "floor": 0.5}))


def test_registry_move_alias_on_defaults_to_pass_and_keeps_the_hash_of_a_policy_without_it():
    from clgate.policy.decide import policy_hash

    plain = parse_policy({"name": "p", "rules": [{"metric": "acc", "floor": 0.5}]})
    assert plain.move_alias_on == ("PASS",) and plain.registry is None
    assert "registry" not in plain.canonical_json()  # the hash of every existing policy is unchanged
    wider = parse_policy(
        {**plain.model_dump(exclude={"registry"}), "registry": {"move_alias_on": ["WARN", "PASS", "WARN"]}}
    )
    assert wider.move_alias_on == ("WARN", "PASS")
    assert policy_hash(wider) != policy_hash(plain)
    schema = Policy.model_json_schema()["$defs"]["RegistryConfig"]["properties"]["move_alias_on"]
    assert schema["items"]["enum"] == ["PASS", "WARN", "FAIL"]  # `clgate schema policy` never offers ERROR
