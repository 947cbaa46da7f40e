"""The example plug-in package, pip-installed beside clgate, used through the command line as a user would:
listed, computed, gated (PASS and FAIL), shown in every report; a broken plug-in named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.cli import run_clgate
from tests.plugins.conftest import REPO, site_env

LOG = REPO / "examples" / "logs" / "spec-example.json"
POLICY = """
name: plug-ins
rules:
  - {{metric: cost_weighted_acc, floor: {floor}}}
  - {{kind: class_group_mean, group: coatings, classes: [bubble, blister, stain], floor: 0.3}}
"""


def _final_cost_weighted(site: Path, tmp_path: Path) -> float:
    done = run_clgate("metrics", str(LOG), "--json", cwd=tmp_path, env=site_env(site))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["metrics"]["cost_weighted_acc"][-1]


def test_plugins_lists_the_installed_package(example_site, tmp_path):
    done = run_clgate("plugins", "--json", cwd=tmp_path, env=site_env(example_site))
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["enabled"] and doc["refused"] == []
    by_name = {p["name"]: p for p in doc["plugins"]}
    assert by_name["cost_weighted_acc"]["type"] == "metric"
    assert by_name["class_group_mean"]["type"] == "rule kind"
    for p in by_name.values():
        assert (p["distribution"], p["version"], p["problem"]) == ("clgate-example-metrics", "0.1.0", None)
    table = run_clgate("plugins", cwd=tmp_path, env={**site_env(example_site), "COLUMNS": "200"})
    assert "cost_weighted_acc" in table.stdout and "clgate-example-metrics 0.1.0" in table.stdout
    off = run_clgate(
        "plugins", "--json", cwd=tmp_path, env={**site_env(example_site), "CLGATE_PLUGINS": "off"}
    )
    assert json.loads(off.stdout) == {"enabled": False, "plugins": [], "refused": []}


def test_metrics_computes_the_plugin_metric(example_site, tmp_path):
    done = run_clgate("metrics", str(LOG), cwd=tmp_path, env=site_env(example_site))
    assert done.returncode == 0, done.stderr
    assert "cost_weighted_acc ↑" in done.stdout
    assert 0 <= _final_cost_weighted(example_site, tmp_path) <= 1


@pytest.mark.parametrize(("margin", "code", "verdict"), [(-0.01, 0, "PASS"), (0.01, 1, "FAIL")])
def test_a_policy_gates_on_the_plugin_metric_and_rule_kind(example_site, tmp_path, margin, code, verdict):
    floor = round(_final_cost_weighted(example_site, tmp_path) + margin, 4)
    (tmp_path / "policy.yaml").write_text(POLICY.format(floor=floor))
    out = tmp_path / "out"
    done = run_clgate(
        "gate",
        str(LOG),
        "--policy",
        "policy.yaml",
        "--out",
        str(out),
        cwd=tmp_path,
        env=site_env(example_site),
    )
    assert done.returncode == code, done.stdout + done.stderr
    decision = json.loads((out / "decision.json").read_text())
    assert decision["verdict"] == verdict
    rules = decision["rules"]
    assert [r["kind"] for r in rules] == ["metric", "class_group_mean"]
    assert rules[1]["id"] == "group coatings mean >= 0.3" and rules[1]["status"] == "pass"
    assert rules[0]["status"] == ("pass" if verdict == "PASS" else "fail")
    assert set(decision["headline"]["plugins"]) == {"cost_weighted_acc"}
    markdown = (out / "report.md").read_text()
    assert "**Plug-in metrics** (final, mean over runs): cost\\_weighted\\_acc ↑ 0." in markdown
    html = (out / "report.html").read_text()
    assert 'id="plugin-metrics"' in html and "group coatings mean &gt;= 0.3" in html
    assert "group coatings mean &gt;= 0.3" in (out / "junit.xml").read_text()
    assert "cost_weighted_acc" in json.loads((out / "metrics.json").read_text())["runs"]["metrics"]


BROKEN = """
from clgate.metrics.plugins import MetricPlugin

def explode(inputs):
    raise ZeroDivisionError("no costs")

EXPLODES = MetricPlugin(id="explodes", name="x", description="x", shape="scalar", higher_is_better=True,
                        range=(0.0, 1.0), compute=explode)
"""


def test_a_broken_plugin_is_named_and_only_its_rule_errors(make_plugin, tmp_path):
    site = make_plugin(
        "cli-broken", BROKEN, metrics={"explodes": "cli_broken:EXPLODES"}, rules={"k": "nowhere:J"}
    )
    (tmp_path / "plain.yaml").write_text("name: plain\nrules:\n  - {metric: acc, floor: 0.1}\n")
    plain = run_clgate("gate", str(LOG), "--policy", "plain.yaml", cwd=tmp_path, env=site_env(site))
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert "warning: plug-in metric 'explodes'" in plain.stderr and "cli-broken 1.0" in plain.stderr
    assert "ZeroDivisionError: no costs" in plain.stderr
    assert "warning: plug-in rule kind 'k'" in plain.stderr and "cannot be loaded" in plain.stderr
    (tmp_path / "on.yaml").write_text(
        "name: uses-broken\nrules:\n  - {metric: explodes, floor: 0.1}\n  - {kind: k, x: 1}\n"
    )
    on = run_clgate("gate", str(LOG), "--policy", "on.yaml", "--json", cwd=tmp_path, env=site_env(site))
    assert on.returncode == 2, on.stdout + on.stderr  # ERROR
    decision = json.loads(on.stdout)
    assert decision["verdict"] == "ERROR"
    assert [r["status"] for r in decision["rules"]] == ["error", "error"]
    assert "ZeroDivisionError: no costs" in decision["rules"][0]["message"]
    assert "plug-in rule kind 'k' is broken" in decision["rules"][1]["message"]
    assert "cli-broken 1.0" in decision["rules"][1]["message"]


def test_a_plugin_rule_with_bad_fields_is_refused_naming_them(example_site, tmp_path):
    (tmp_path / "bad.yaml").write_text(
        "name: bad\nrules:\n  - {kind: class_group_mean, group: g, classes: [], flor: 0.5}\n"
        "  - {kind: class_group_meen, group: g, classes: [a], floor: 0.5}\n"
    )
    done = run_clgate("gate", str(LOG), "--policy", "bad.yaml", cwd=tmp_path, env=site_env(example_site))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "rules[0].classes: Value error, name at least one class" in done.stderr or (
        "rules[0].classes: name at least one class" in done.stderr
    )
    assert "rules[0].floor: Field required" in done.stderr and "rules[0].flor" in done.stderr
    assert (
        "rules[1].kind: unknown rule kind 'class_group_meen' (did you mean 'class_group_mean'?" in done.stderr
    )
    assert "Traceback" not in done.stderr


def test_the_policy_schema_says_plugin_kinds_are_validated_at_load(tmp_path):
    done = run_clgate("schema", "policy", cwd=tmp_path)
    assert done.returncode == 0
    schema = json.loads(done.stdout)
    assert "validated at load" in schema["$defs"]["PluginRule"]["properties"]["kind"]["description"]
