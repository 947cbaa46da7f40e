"""What a user's CI gets from ``clgate gate``: the build named (candidate, commit, CI run from the CI's own
variables), shipped policies by name, a first release without a baseline; and ``clgate init``."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
import yaml
from typer.testing import CliRunner

from clgate._version import __version__
from clgate.cli import app
from clgate.documents import dump_log
from clgate.presets import preset_names
from clgate.provenance import build_info

CI_VARIABLES = ("GITHUB_", "CI_", "GIT_COMMIT", "BUILD_URL", "BUILDKITE")

CI_CASES = [
    pytest.param(
        {
            "GITHUB_SHA": "1f2e3d4c5b6a79881f2e3d4c5b6a79881f2e3d4c",
            "GITHUB_SERVER_URL": "https://github.example",
            "GITHUB_REPOSITORY": "acme/vision",
            "GITHUB_RUN_ID": "4242",
        },
        (
            "github",
            "1f2e3d4c5b6a79881f2e3d4c5b6a79881f2e3d4c",
            "https://github.example/acme/vision/actions/runs/4242",
        ),
        id="github",
    ),
    pytest.param(
        {"CI_COMMIT_SHA": "abcdef0123456789", "CI_PIPELINE_URL": "https://gitlab.example/acme/-/pipelines/7"},
        ("gitlab", "abcdef0123456789", "https://gitlab.example/acme/-/pipelines/7"),
        id="gitlab",
    ),
    pytest.param(
        {"GIT_COMMIT": "0badc0de0badc0de", "BUILD_URL": "https://jenkins.example/job/vision/12/"},
        ("jenkins", "0badc0de0badc0de", "https://jenkins.example/job/vision/12/"),
        id="jenkins",
    ),
    pytest.param(
        {
            "BUILDKITE_COMMIT": "feedface00",
            "BUILDKITE_BUILD_URL": "https://buildkite.example/acme/vision/builds/3",
        },
        ("buildkite", "feedface00", "https://buildkite.example/acme/vision/builds/3"),
        id="buildkite",
    ),
]


@pytest.fixture
def no_ci(monkeypatch):
    """The test's own CI variables removed, so each case sees only the CI it fakes."""
    import os

    for name in list(os.environ):
        if name.startswith(CI_VARIABLES):
            monkeypatch.delenv(name)


@pytest.fixture
def logs(tmp_path, good_log):
    path = tmp_path / "candidate.json"
    dump_log(good_log(seed=0), path)
    return path


def _gate(*args: str):
    return CliRunner().invoke(app, ["gate", *args])


@pytest.mark.parametrize(("variables", "expected"), CI_CASES)
def test_the_verdict_names_candidate_commit_and_run_everywhere(
    variables, expected, tmp_path, logs, monkeypatch, no_ci
):
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    ci, commit, run_url = expected
    out = tmp_path / "out"
    res = _gate("--log", str(logs), "--policy", "preset:starter", "--baseline", str(logs), "--out", str(out),
                "--candidate", "defect-classifier", "--candidate-version", "2.4.0")  # fmt: skip
    assert res.exit_code in (0, 1), res.output
    assert f"certifies: defect-classifier 2.4.0 · commit {commit[:12]} ({ci}) · run {run_url}" in res.output
    decision = json.loads((out / "decision.json").read_text())
    assert decision["provenance"]["candidate"] == {"name": "defect-classifier", "version": "2.4.0"}
    assert decision["provenance"]["build"] == {"ci": ci, "commit": commit, "run_url": run_url}
    props = {p.get("name"): p.get("value") for p in ET.parse(out / "junit.xml").getroot().iter("property")}
    assert props["candidate"] == "defect-classifier" and props["candidate_version"] == "2.4.0"
    assert props["commit"] == commit and props["ci"] == ci and props["ci_run_url"] == run_url
    first_lines = (out / "report.md").read_text().splitlines()[:3]
    assert "defect-classifier 2.4.0" in first_lines[2] and commit[:12] in first_lines[2]
    html = (out / "report.html").read_text()
    header = html[html.index('<header id="decision">') : html.index("</header>")]  # the first screen
    assert 'id="model">defect-classifier 2.4.0<' in header
    assert commit in header and f'href="{run_url}"' in header
    page_header = html[html.index("@top-left") : html.index("@bottom-right")]  # every PDF page
    assert "defect-classifier 2.4.0" in page_header and commit[:12] in page_header


def test_no_ci_no_build_and_the_model_label_stays(tmp_path, logs, no_ci):
    assert build_info({}) is None
    out = tmp_path / "out"
    res = _gate("--log", str(logs), "--policy", "preset:starter", "--baseline-optional", "--out", str(out))
    assert res.exit_code in (0, 1), res.output
    decision = json.loads((out / "decision.json").read_text())
    assert "build" not in decision["provenance"] and "candidate" not in decision["provenance"]
    assert 'id="build"' not in (out / "report.html").read_text()


def test_a_version_without_a_name_is_refused(logs):
    res = _gate("--log", str(logs), "--policy", "preset:starter", "--baseline-optional",
                "--candidate-version", "2.4.0")  # fmt: skip
    assert res.exit_code == 2
    assert "--candidate NAME" in res.output


def test_presets_are_listed_and_reachable_by_name(logs):
    listed = CliRunner().invoke(app, ["policy", "presets"])
    assert listed.exit_code == 0
    for name in preset_names():
        assert f"preset:{name}" in listed.output
    assert {"starter", "regression-only", "production-strict"} <= set(preset_names())
    res = _gate("--log", str(logs), "--policy", "preset:regression-only", "--baseline", str(logs), "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["policy_name"] == "regression-only"


def test_an_unknown_preset_names_the_known_ones(logs):
    res = _gate("--log", str(logs), "--policy", "preset:strictest", "--baseline", str(logs))
    assert res.exit_code == 2
    assert "unknown preset 'strictest'" in res.output and "regression-only" in res.output


def test_first_release_leaves_regression_rules_out_and_says_so(tmp_path, logs, no_ci):
    out = tmp_path / "out"
    missing = tmp_path / "released" / "log.json"
    res = _gate("--log", str(logs), "--policy", "preset:starter", "--baseline", str(missing),
                "--baseline-optional", "--out", str(out))  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "no baseline yet" in res.output and str(missing) in res.output
    decision = json.loads((out / "decision.json").read_text())
    assert all(rule["kind"] != "baseline" for rule in decision["rules"])
    assert decision["provenance"]["skipped_without_baseline"] == [
        "class-regression",
        "worst-class-regression",
    ]
    assert 'id="no-baseline"' in (out / "report.html").read_text()
    assert "no baseline yet" in (out / "report.md").read_text()
    # without --baseline-optional a missing baseline stays an input error
    res = _gate("--log", str(logs), "--policy", "preset:starter", "--baseline", str(missing))
    assert res.exit_code == 2


def test_first_release_with_only_regression_rules_is_an_input_error(tmp_path, logs):
    res = _gate("--log", str(logs), "--policy", "preset:regression-only",
                "--baseline", str(tmp_path / "none.json"), "--baseline-optional")  # fmt: skip
    assert res.exit_code == 2
    assert "nothing left to judge" in res.output


def test_count_thresholds_print_as_counts(logs, policy_of, tmp_path):
    policy = tmp_path / "p.yaml"
    policy.write_text(
        yaml.safe_dump(
            policy_of(
                {"id": "fmeca-no-high", "fmeca": "priority", "fail_at": "High"},
                {"id": "worst-class", "metric": "mica", "floor": 0.5},
                fmeca={"default_severity": 9, "default_detection": 8},
            ).model_dump(mode="json", exclude_none=True)
        )
    )
    out = tmp_path / "out"
    res = _gate("--log", str(logs), "--policy", str(policy), "--out", str(out))
    assert res.exit_code in (0, 1), res.output
    md = (out / "report.md").read_text()
    assert "| fmeca-no-high | 6 | &lt;= 0 |" in md  # six modes at High, none allowed
    assert "| worst-class | 0.9000 | &gt;= 0.5000 |" in md  # a fraction stays a fraction
    assert "<= 0.0000" not in res.output and "&lt;= 0.0000" not in (out / "report.html").read_text()


def test_init_writes_a_starter_policy_and_a_pinned_ci_file(tmp_path):
    res = CliRunner().invoke(app, ["init", "--ci", "github", "--repo", str(tmp_path)])
    assert res.exit_code == 0, res.output
    workflow = yaml.safe_load((tmp_path / ".github" / "workflows" / "clgate.yml").read_text())
    assert workflow["env"]["CLGATE_VERSION"] == __version__
    assert workflow["env"]["CLGATE_POLICY"] == "clgate-policy.yaml"
    assert yaml.safe_load((tmp_path / "clgate-policy.yaml").read_text())["name"] == "starter"
    res = CliRunner().invoke(app, ["init", "--ci", "gitlab", "--repo", str(tmp_path)])
    assert res.exit_code == 2 and "clgate-policy.yaml" in res.output  # the policy exists: nothing written
    assert not (tmp_path / ".gitlab-ci.yml").exists()


def test_init_refuses_to_overwrite_without_force(tmp_path):
    mine = tmp_path / ".gitlab-ci.yml"
    mine.write_text("build:\n  script: [make]\n")
    res = CliRunner().invoke(app, ["init", "--ci", "gitlab", "--repo", str(tmp_path)])
    assert res.exit_code == 2 and "--force" in res.output
    assert mine.read_text() == "build:\n  script: [make]\n" and not (tmp_path / "clgate-policy.yaml").exists()
    res = CliRunner().invoke(app, ["init", "--ci", "gitlab", "--repo", str(tmp_path), "--force"])
    assert res.exit_code == 0, res.output
    assert "clgate-gate" in yaml.safe_load(mine.read_text())


def test_init_pins_the_version_that_wrote_the_file(tmp_path, monkeypatch):
    import clgate._version

    monkeypatch.setattr(clgate._version, "__version__", "9.8.7")
    res = CliRunner().invoke(app, ["init", "--ci", "gitlab", "--repo", str(tmp_path)])
    assert res.exit_code == 0, res.output
    job = yaml.safe_load((tmp_path / ".gitlab-ci.yml").read_text())["clgate-gate"]
    assert job["variables"]["CLGATE_VERSION"] == "9.8.7"
