"""``clgate gate``: exit codes for PASS, WARN, FAIL, ERROR, bad policy, bad log; the files it writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clgate.cli import app
from clgate.documents import dump_log

runner = CliRunner()


@pytest.fixture
def files(tmp_path, good_log, forgetful_log):
    good = tmp_path / "good.json"
    bad = tmp_path / "forgetful.json"
    dump_log(good_log(), good)
    dump_log(forgetful_log(seed=4), bad)
    return {"good": good, "forgetful": bad, "dir": tmp_path}


def _policy(tmp_path: Path, text: str) -> Path:
    path = tmp_path / f"policy-{abs(hash(text))}.yaml"
    path.write_text("name: cli\nrules:\n" + text)
    return path


def _gate(*args: str):
    return runner.invoke(app, ["gate", *map(str, args)])


def test_pass_exits_0(files):
    p = _policy(files["dir"], "  - {metric: mica, floor: 0.7}\n")
    res = _gate("--log", files["good"], "--policy", p)
    assert res.exit_code == 0, res.output
    assert "PASS" in res.output and "mica" in res.output


def test_warn_exits_0_unless_fail_on_warn(files):
    p = _policy(files["dir"], "  - {metric: mica, floor: 0.7, severity: warn}\n")
    res = _gate("--log", files["forgetful"], "--policy", p)
    assert res.exit_code == 0 and "WARN" in res.output
    strict = _gate("--log", files["forgetful"], "--policy", p, "--fail-on-warn")
    assert strict.exit_code == 1


def test_fail_exits_1(files):
    p = _policy(files["dir"], "  - {metric: mica, floor: 0.7}\n")
    res = _gate("--log", files["forgetful"], "--policy", p)
    assert res.exit_code == 1 and "FAIL" in res.output


def test_bad_policy_exits_2_with_the_rule_position(files):
    p = _policy(files["dir"], "  - {metric: acc, floor: 0.5}\n  - {metric: mika, floor: 0.5}\n")
    res = _gate("--log", files["good"], "--policy", p)
    assert res.exit_code == 2
    assert "rules[1].metric: unknown metric id 'mika' (did you mean 'mica'?)" in res.output
    assert "Traceback" not in res.output


@pytest.mark.parametrize(
    "content, message",
    [
        pytest.param("{not json", "invalid evaluation log", id="not-json"),
        pytest.param(
            json.dumps(
                {
                    "tasks": [[0, 1]],
                    "points": [
                        {"iteration": 1, "task": 1, "task_end": True, "correct": [5, 9], "total": [4, 9]}
                    ],
                }
            ),
            "points[0].correct[0]: correct (5) exceeds total (4)",
            id="contract",
        ),
    ],
)
def test_bad_log_exits_2(files, content, message):
    log = files["dir"] / "bad.json"
    log.write_text(content)
    p = _policy(files["dir"], "  - {metric: acc, floor: 0.5}\n")
    res = _gate("--log", log, "--policy", p)
    assert res.exit_code == 2 and message in res.output


def test_unevaluable_rule_is_error_exit_2(files):
    p = _policy(files["dir"], "  - {baseline: classes, max_drop: 0.1}\n")
    res = _gate("--log", files["good"], "--policy", p)
    assert res.exit_code == 2 and "ERROR" in res.output and "--baseline" in res.output


def test_usage_errors_exit_2(files):
    p = _policy(files["dir"], "  - {metric: acc, floor: 0.5}\n")
    assert _gate("--log", files["good"]).exit_code == 2  # no --policy
    assert _gate("--policy", p).exit_code == 2  # nothing to gate
    assert _gate("--policy", p, "--log", files["good"], "--job", p).exit_code == 2
    assert _gate("--policy", p, "--log", files["dir"] / "missing.json").exit_code == 2


def test_outputs_baseline_and_several_logs(files):
    p = _policy(files["dir"], "  - {metric: mica, floor: 0.7}\n  - {baseline: classes, max_drop: 0.1}\n")
    out = files["dir"] / "out"
    junit = files["dir"] / "ci" / "junit.xml"
    summary = files["dir"] / "summary.md"
    summary.write_text("earlier step\n")
    res = _gate(
        "--log",
        files["good"],
        files["forgetful"],
        "--policy",
        p,
        "--baseline",
        files["good"],
        "--out",
        out,
        "--junit",
        junit,
        "--summary-md",
        summary,
    )
    assert res.exit_code == 1, res.output
    assert sorted(x.name for x in out.iterdir()) == sorted(
        ["report.html", "report.md", "decision.json", "metrics.json", "fmeca.csv", "junit.xml"]
    )
    decision = json.loads((out / "decision.json").read_text())
    assert decision["runs"] == 2 and decision["rules"][1]["evidence"]["class_name"] == "ant"
    assert junit.read_text().startswith("<?xml")
    text = summary.read_text()
    assert text.startswith("earlier step\n## ❌ clgate gate: FAIL")  # appended, as $GITHUB_STEP_SUMMARY wants


def test_json_output(files):
    p = _policy(files["dir"], "  - {metric: mica, floor: 0.7}\n")
    res = _gate("--log", files["good"], "--policy", p, "--json")
    assert res.exit_code == 0 and json.loads(res.output)["verdict"] == "PASS"


def test_console_script_exit_code(files):
    p = _policy(files["dir"], "  - {metric: mica, floor: 0.7}\n")
    exe = Path(sys.executable).with_name("clgate")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "clgate"]
    proc = subprocess.run(
        [*cmd, "gate", "--log", str(files["forgetful"]), "--policy", str(p)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert "FAIL" in proc.stdout


def test_bad_input_still_writes_junit_and_summary_for_ci(files):
    from junitparser import Error, JUnitXml

    p = _policy(files["dir"], "  - {metric: mika, floor: 0.5}\n")
    junit = files["dir"] / "junit-bad.xml"
    summary = files["dir"] / "summary-bad.md"
    res = _gate("--log", files["good"], "--policy", p, "--junit", junit, "--summary-md", summary)
    assert res.exit_code == 2
    case = next(iter(next(iter(JUnitXml.fromfile(str(junit))))))
    assert case.name == "inputs" and isinstance(case.result[0], Error)
    assert "unknown metric id 'mika'" in case.result[0].text
    assert summary.read_text().startswith("## ⛔ clgate gate: ERROR (invalid input)")
