"""Plug-ins written carelessly or with ill will: each mistake below once crashed clgate, changed a value
other code reads, corrupted ``--json`` output or turned a FAIL into exit status 0. Now each is a named
failure of that plug-in only — a null or an ``error`` rule — and everything else is as without it."""

from __future__ import annotations

import json

import pytest

from clgate.metrics import compute_metrics
from clgate.metrics.plugins import FAILED, MetricInputs
from clgate.metrics.registry import found_plugins
from clgate.policy import PolicyError, decide, parse_policy
from tests.fixtures.cli import run_clgate
from tests.plugins.conftest import REPO, site_env
from tests.plugins.test_plugin_metrics import _builtins, _log

METRICS = """
import sys
import numpy as np
from clgate.metrics.plugins import MetricPlugin
from clgate.metrics.steps import Outcome

print("hostile_metrics imported")  # import-time chatter: must not reach stdout

def make(mid, fn, **kw):
    fields = dict(id=mid, name=mid, description="d", shape="scalar", higher_is_better=True,
                  range=(0.0, 1.0), compute=fn)
    return MetricPlugin(**{**fields, **kw})

def deep(inputs):
    evidence = node = {}
    for _ in range(5000):
        node["a"] = {}
        node = node["a"]
    return Outcome(0.5, evidence=evidence)

def unlock(inputs):  # the usual answer to "assignment destination is read-only"
    inputs.class_acc.setflags(write=True)
    inputs.class_acc[...] = 0.0
    return 0.5

def scribble(inputs):  # nested lists and dicts of the inputs are plain Python: writable
    inputs.builtins["acc"][0] = 0.0
    inputs.meta["nested"]["x"] = "scribbled"
    return 0.5

def chatty(inputs):
    print("debug: computing")
    return 0.5

HUGE_INT = make("huge_int", lambda i: 10**400)
DEEP = make("deep", deep)
UNLOCK = make("aa_unlock", unlock)
SCRIBBLE = make("ab_scribble", scribble)
READER = make("zz_reader", lambda i: float(i.builtins["acc"][0]), range=(0.0, 1.0))
META_READER = make("zz_meta", lambda i: 1.0 if i.meta["nested"]["x"] == "clean" else 0.0)
ARRAY_READER = make("zz_array", lambda i: float(np.nanmax(i.class_acc)))
EXITS = make("exits", lambda i: sys.exit(0))
INTERRUPT = make("interrupt", lambda i: (_ for _ in ()).throw(KeyboardInterrupt()))
CHATTY = make("chatty", chatty)
"""

DECLARATIONS = """
from clgate.metrics.plugins import MetricPlugin

def make(mid, **kw):
    fields = dict(id=mid, name=mid, description="d", shape="scalar", higher_is_better=True,
                  range=(0.0, 1.0), compute=lambda i: 0.5)
    return MetricPlugin(**{**fields, **kw})

NONE_NEEDS = make("none_needs", needs=None)
TEXT_NEEDS = make("text_needs", needs="counts")
LIST_NEEDS = make("list_needs", needs=[["counts"]])
TEXT_RANGE = make("text_range", range=("0", "1"))
NO_NAME = make("no_name", name=None)
"""

RULES = """
import sys
from typing import Literal
from pydantic import field_validator
from clgate.policy.judges import Judge, Judged
from clgate.schemas.policy import RuleBase

def model(kind):
    return type(f"M_{kind}", (RuleBase,), {"__annotations__": {"kind": Literal[kind]}})

def ok(rule, runs, inputs):
    return Judged(0.9, 0.5, ">=", 0.4, {}, "fine")

def scribbles(rule, runs, inputs):
    runs[0].metrics["acc"][-1] = 0.0
    runs[0].metrics["mica"] = 1.0
    return ok(rule, runs, inputs)

def exits(rule, runs, inputs):
    sys.exit(0)

def contradicts(rule, runs, inputs):
    return Judged(0.1, 0.5, ">=", 0.4, {}, "fine")  # 0.1 >= 0.5 reported as met

class Strict(RuleBase):
    kind: Literal["strict"]
    x: int = 0

    @field_validator("x")
    @classmethod
    def _x(cls, v):
        return {}["missing"]  # a KeyError: pydantic wraps only ValueError and AssertionError

SCRIBBLES = Judge("scribbles", model("scribbles"), subject=lambda r: "x", judge=scribbles)
EXITS_RULE = Judge("exits", model("exits"), subject=lambda r: "x", judge=exits)
NUMBER_LABEL = Judge("number_label", model("number_label"), subject=lambda r: "x", judge=ok,
                     label=lambda r: 42)
CONTRADICTS = Judge("contradicts", model("contradicts"), subject=lambda r: "x", judge=contradicts)
STRICT = Judge("strict", Strict, subject=lambda r: "x", judge=ok)
"""

METRIC_IDS = {
    "huge_int": "HUGE_INT",
    "deep": "DEEP",
    "aa_unlock": "UNLOCK",
    "ab_scribble": "SCRIBBLE",
    "zz_reader": "READER",
    "zz_meta": "META_READER",
    "zz_array": "ARRAY_READER",
    "exits": "EXITS",
    "chatty": "CHATTY",
}
DECLARED = ("none_needs", "text_needs", "list_needs", "text_range", "no_name")
RULE_KINDS = {"scribbles": "SCRIBBLES", "exits": "EXITS_RULE", "number_label": "NUMBER_LABEL"}
RULE_KINDS |= {"contradicts": "CONTRADICTS", "strict": "STRICT"}


def _site(make_plugin, metrics: tuple[str, ...] = (), rules: tuple[str, ...] = ()):
    """The hostile distribution with only these entry points (one mistake must not hide another)."""
    return make_plugin(
        "hostile-metrics",
        METRICS + RULES,
        metrics={k: f"hostile_metrics:{METRIC_IDS[k]}" for k in metrics},
        rules={k: f"hostile_metrics:{RULE_KINDS[k]}" for k in rules},
    )


@pytest.fixture
def hostile(plugins_on, make_plugin):
    """``hostile(metrics=…, rules=…)``: those hostile plug-ins installed for this test."""

    def on(metrics: tuple[str, ...] = (), rules: tuple[str, ...] = ()) -> None:
        plugins_on(_site(make_plugin, metrics, rules))

    return on


def _meta_log(seed: int = 5):
    return _log(seed, meta={"nested": {"x": "clean"}})


def test_bad_values_and_evidence_are_named_nulls_not_crashes(hostile):
    hostile(metrics=("huge_int", "deep", "exits"))
    log = _meta_log()
    result = compute_metrics(log)
    assert result.metrics["huge_int"] is None and "too large for a float" in result.reasons["huge_int"]
    assert result.metrics["deep"] is None and result.reasons["deep"].startswith(FAILED)
    assert "evidence" in result.reasons["deep"]
    assert result.metrics["exits"] is None and "raised SystemExit: 0" in result.reasons["exits"]
    json.loads(result.model_dump_json())  # the whole result still serializes


def test_mistaken_declarations_are_broken_not_crashes(plugins_on, make_plugin):
    metrics = {k: f"mistaken_metrics:{k.upper()}" for k in DECLARED}
    plugins_on(make_plugin("mistaken-metrics", DECLARATIONS, metrics=metrics))
    problems = {m.id: m.problem for m in found_plugins().metrics.values()}
    assert "needs: must be a list of names" in problems["none_needs"]
    assert "got 'counts'" in problems["text_needs"]  # not "unknown ['c', 'n', 'o', …]"
    assert "needs: unknown [['counts']]" in problems["list_needs"]
    assert "range: must be two numbers" in problems["text_range"]
    assert problems["no_name"] == "name: must be text"
    result = compute_metrics(_meta_log())
    assert result.metrics["text_range"] is None and "range" in result.reasons["text_range"]


def test_no_plugin_changes_what_others_read(hostile, monkeypatch):
    hostile(metrics=("aa_unlock", "ab_scribble", "zz_reader", "zz_meta", "zz_array"))
    log = _meta_log()
    monkeypatch.setenv("CLGATE_PLUGINS", "off")
    from tests.plugins.conftest import reload_all

    reload_all()
    without = compute_metrics(log)
    monkeypatch.delenv("CLGATE_PLUGINS")
    reload_all()
    result = compute_metrics(log)
    assert "cannot set WRITEABLE flag" in result.reasons.get("aa_unlock", "")
    assert result.metrics["zz_array"] > 0  # the class accuracies are not the zeros aa_unlock wrote
    assert result.metrics["ab_scribble"] == 0.5  # its writes succeeded, into its own copies
    assert result.metrics["zz_reader"] == pytest.approx(without.metrics["acc"][0])
    assert result.metrics["zz_meta"] == 1.0
    assert _builtins(result) == without.metrics
    assert result.classes == without.classes  # computed after the plug-ins, from the same arrays
    assert result.meta == without.meta


def test_inputs_cannot_be_made_writable():
    inputs = MetricInputs.example()
    for name in ("R", "r", "class_acc", "correct", "total", "task_acc", "class_task", "iterations"):
        with pytest.raises(ValueError, match="WRITEABLE"):
            getattr(inputs, name).setflags(write=True)
    assert all(not t.flags.writeable for t in inputs.tasks)


def test_what_a_plugin_prints_goes_to_stderr(hostile, capsys):
    hostile(metrics=("chatty",))
    compute_metrics(_meta_log())
    decide([_meta_log()], parse_policy({"name": "p", "rules": [{"metric": "chatty", "floor": 0.0}]}))
    out = capsys.readouterr()
    assert out.out == "" and "debug: computing" in out.err


def test_keyboard_interrupt_is_the_operators(plugins_on, make_plugin):
    site = make_plugin(
        "interrupting",
        METRICS.replace("print(", "(") + "\nINTERRUPT_ONLY = INTERRUPT\n",
        metrics={"interrupt": "interrupting:INTERRUPT_ONLY"},
    )
    plugins_on(site)
    with pytest.raises(KeyboardInterrupt):
        compute_metrics(_meta_log())


def _rules(*rules: dict) -> dict:
    return {"name": "p", "rules": [*rules, {"metric": "acc", "floor": 0.99}, {"metric": "mica", "floor": 0}]}


def test_a_judge_cannot_change_other_rules_values(hostile):
    hostile(rules=("scribbles",))
    log = _meta_log()
    plain = decide([log], parse_policy(_rules()))
    decision = decide([log], parse_policy(_rules({"kind": "scribbles"})))
    assert decision.rules[0].status == "pass"
    assert [(r.value, r.status) for r in decision.rules[1:]] == [(r.value, r.status) for r in plain.rules]
    assert decision.headline == plain.headline  # built from the metrics after the rules


@pytest.mark.parametrize(
    ("kind", "why"),
    [
        pytest.param("exits", "raised SystemExit: 0", id="sys-exit"),
        pytest.param("number_label", "labelled the rule with a int, not text", id="label-not-text"),
        pytest.param("contradicts", "margin 0.4 for 0.1 >= 0.5: the margin contradicts", id="margin"),
    ],
)
def test_a_malformed_judge_is_an_error_not_a_crash_or_pass(hostile, kind, why):
    hostile(rules=(kind,))
    decision = decide([_meta_log()], parse_policy(_rules({"kind": kind})))
    assert decision.verdict == "ERROR" and decision.rules[0].status == "error"
    assert why in decision.rules[0].message and "hostile-metrics 1.0" in decision.rules[0].message
    assert [r.status for r in decision.rules[1:]] == ["fail", "pass"]


def test_a_validator_that_raises_is_a_policy_error_naming_the_plugin(hostile):
    hostile(rules=("strict",))
    with pytest.raises(PolicyError) as caught:
        parse_policy({"name": "p", "rules": [{"kind": "strict", "x": 1}]})
    assert "rules[0]: plug-in rule kind 'strict' (hostile-metrics 1.0" in str(caught.value.problems)
    assert "raised KeyError: 'missing'" in str(caught.value.problems)


def test_the_command_line_keeps_its_exit_status_and_json(make_plugin, tmp_path):
    """``sys.exit(0)`` in a plug-in ended ``clgate gate`` with status 0 on a FAIL; prints broke ``--json``."""
    log = REPO / "examples" / "logs" / "spec-example.json"
    (tmp_path / "p.yaml").write_text("name: p\nrules:\n  - {metric: acc, floor: 0.99}\n")
    env = site_env(_site(make_plugin, metrics=("exits", "chatty")))
    done = run_clgate("gate", str(log), "-p", "p.yaml", "--json", cwd=tmp_path, env=env)
    assert done.returncode == 1, done.stderr  # FAIL, as without the plug-ins
    assert json.loads(done.stdout)["verdict"] == "FAIL"
    assert "raised SystemExit: 0" in done.stderr and "hostile_metrics imported" in done.stderr
    metrics = run_clgate("metrics", str(log), "--json", cwd=tmp_path, env=env)
    assert metrics.returncode == 0, metrics.stderr
    assert json.loads(metrics.stdout)["metrics"]["chatty"] == 0.5


GAUGES = """
from clgate.metrics.plugins import MetricPlugin

def make(mid, lo, hi):
    return MetricPlugin(id=mid, name=mid, description="d", shape="scalar", higher_is_better=True,
                        range=(lo, hi), compute=lambda i: 0.5, gauge=True)

X = make("x", 0.0, 1.0)             # clgate_plugin_x_ratio
X_RATIO = make("x_ratio", 0.0, 2.0)  # clgate_plugin_x_ratio too: not a ratio, no suffix
"""


def test_a_plugin_gauge_that_takes_anothers_name_is_not_exported_and_said(plugins_on, make_plugin):
    """Two plug-ins whose gauges share a Prometheus name: the first id keeps it, the other's value is
    computed and gated as usual but not exported (a registry holds a name once), with a warning."""
    from clgate.service.metrics import headline_gauges

    plugins_on(
        make_plugin(
            "gauge-metrics", GAUGES, metrics={"x": "gauge_metrics:X", "x_ratio": "gauge_metrics:X_RATIO"}
        )
    )
    found = found_plugins()
    assert found.unexported == [
        f"plug-in metric 'x_ratio' ({found.metrics['x_ratio'].origin}) is not exported to Prometheus: its "
        "gauge name clgate_plugin_x_ratio is plug-in metric 'x''s"
    ]
    assert found.unexported[0] in found.warnings()
    assert [g[:2] for g in headline_gauges() if g[0] in ("x", "x_ratio")] == [("x", "clgate_plugin_x_ratio")]
    result = compute_metrics(_meta_log())
    assert result.metrics["x"] == result.metrics["x_ratio"] == 0.5
