"""The CI templates, used as a user would: a scratch git repository with the user's own evaluation logs
and no clgate file, the template copied in (``clgate init``, or the Action / GitLab component referenced),
and its shell steps run in order with the template's inputs substituted and the platform's GITHUB_* /
CI_* variables faked, with clgate installed from the wheel just built (``pip --find-links``, no index).

First run: no baseline yet (PASS, the regression rules left out and said so); then the released log
is promoted to the baseline and a candidate that forgot a class FAILs on the regression rule.

Slow: builds the wheel and a venv."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from clgate._version import __version__
from clgate.documents import dump_log

REPO = Path(__file__).resolve().parents[2]
SHA = "5e1f00d5e1f00d5e1f00d5e1f00d5e1f00d5e1f0"
pytestmark = pytest.mark.slow

_EXPRESSION = re.compile(r"\$\{\{\s*(.+?)\s*\}\}")
_GITLAB_INPUT = re.compile(r"\$\[\[\s*inputs\.([\w-]+)\s*\]\]")


def _yaml(path: Path) -> list[Any]:
    from ruamel.yaml import YAML  # YAML 1.2, as the platforms read it

    return list(YAML(typ="safe", pure=True).load_all(path.read_text(encoding="utf-8")))


def _substitute(text: str, context: dict[str, str]) -> str:
    """``${{ name }}`` → its value; an expression this harness does not know fails the test."""

    def one(match: re.Match[str]) -> str:
        expression = match.group(1)
        assert expression in context, f"unknown expression ${{{{ {expression} }}}} in {text!r}"
        return context[expression]

    return _EXPRESSION.sub(one, text)


@pytest.fixture
def user_repo(tmp_path, good_log) -> Path:
    """A user's repository: their logs (two seeds), their code, no clgate file."""
    repo = tmp_path / "vision"
    (repo / "eval-logs").mkdir(parents=True)
    (repo / "train.py").write_text("print('the user trains their model here')\n")
    dump_log(good_log(seed=0), repo / "eval-logs" / "log-seed0.json")
    dump_log(good_log(seed=1, level=0.88), repo / "eval-logs" / "log-seed1.json")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    return repo


def _platform_env(venv: Path, wheel: Path, repo: Path, extra: dict[str, str]) -> dict[str, str]:
    keep = ("HOME", "LANG", "LC_ALL", "TMPDIR", "USER")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}/usr/local/bin:/usr/bin:/bin",
        PIP_NO_INDEX="1",  # the install step finds clgate in the wheel's folder, nowhere else
        PIP_FIND_LINKS=str(wheel.parent),
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        CI="true",
    )
    env.update(extra)
    return env


def _run_script(script: str, repo: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )


def _github_env(repo: Path, tmp: Path) -> dict[str, str]:
    (tmp / "gh").mkdir(parents=True, exist_ok=True)
    for name in ("summary.md", "output.txt"):
        (tmp / "gh" / name).write_text("")
    return {
        "GITHUB_ACTIONS": "true",
        "GITHUB_SHA": SHA,
        "GITHUB_REPOSITORY": "acme/vision",
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_RUN_ID": "777",
        "GITHUB_REF": "refs/pull/3/merge",
        "GITHUB_WORKSPACE": str(repo),
        "GITHUB_STEP_SUMMARY": str(tmp / "gh" / "summary.md"),
        "GITHUB_OUTPUT": str(tmp / "gh" / "output.txt"),
    }


def _run_github_steps(
    steps: list[dict[str, Any]], env: dict[str, str], repo: Path, context: dict[str, str]
) -> subprocess.CompletedProcess[str] | None:
    """Each ``run:`` step in order, as the runner does (bash -eo pipefail, the step's env); ``uses:``
    steps are the platform's (checkout, setup-python, upload) and are not run here. Stops at a failure."""
    done = None
    for step in steps:
        if "run" not in step:
            continue
        step_env = {**env, **{k: _substitute(str(v), context) for k, v in (step.get("env") or {}).items()}}
        done = _run_script(_substitute(step["run"], context), repo, step_env)
        if done.returncode != 0:
            return done
    return done


def _verdict(repo: Path, out: str) -> dict[str, Any]:
    return json.loads((repo / out / "decision.json").read_text())


def _promote_and_regress(repo: Path, forgetful_log: Callable[..., Any]) -> None:
    """What the templates tell the user: the released log becomes released/log.json; then a new
    candidate forgets class 'ant' (0.9 → 0.5)."""
    (repo / "released").mkdir()
    shutil.copy(repo / "eval-logs" / "log-seed0.json", repo / "released" / "log.json")
    for old in (repo / "eval-logs").glob("*.json"):
        old.unlink()
    dump_log(forgetful_log(seed=0), repo / "eval-logs" / "log-seed0.json")


def _check_first_run(done, repo: Path, out: str, summary: Path | None) -> None:
    assert done is not None and done.returncode == 0, done.stdout + done.stderr if done else "no step ran"
    assert "no baseline yet" in done.stderr and "Traceback" not in done.stderr
    decision = _verdict(repo, out)
    assert decision["verdict"] == "PASS" and decision["runs"] == 2
    assert decision["provenance"]["build"]["commit"] == SHA
    assert decision["provenance"]["skipped_without_baseline"]
    assert (repo / out / "junit.xml").is_file() and (repo / out / "report.html").is_file()
    if summary is not None:
        assert summary.read_text().startswith("## ✅ clgate gate: PASS")


def _check_regression(done, repo: Path, out: str) -> None:
    assert done is not None and done.returncode == 1, done.stdout + done.stderr if done else "no step ran"
    decision = _verdict(repo, out)
    assert decision["verdict"] == "FAIL"
    failed = {r["id"] for r in decision["rules"] if r["status"] == "fail"}
    assert "class-regression" in failed, failed
    assert decision["hashes"]["baseline"] is not None


def _init(venv: Path, repo: Path, ci: str) -> None:
    done = subprocess.run(
        [str(venv / "bin" / "clgate"), "init", "--ci", ci],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_github_workflow_in_a_users_repository(user_venv, wheel, user_repo, tmp_path, forgetful_log):
    _init(user_venv, user_repo, "github")
    [workflow] = _yaml(user_repo / ".github" / "workflows" / "clgate.yml")
    assert workflow["env"]["CLGATE_VERSION"] == __version__
    job = workflow["jobs"]["gate"]
    for attempt, check in ((1, "first"), (2, "regression")):
        github = _github_env(user_repo, tmp_path / str(attempt))
        env = _platform_env(user_venv, wheel, user_repo, {**github, **workflow["env"]})
        done = _run_github_steps(job["steps"], env, user_repo, {})
        if check == "first":
            _check_first_run(done, user_repo, "gate-out", Path(github["GITHUB_STEP_SUMMARY"]))
            _promote_and_regress(user_repo, forgetful_log)
        else:
            _check_regression(done, user_repo, "gate-out")


def _action_context(action: dict[str, Any], given: dict[str, str], github: dict[str, str]) -> dict[str, str]:
    context = {"github.repository": github["GITHUB_REPOSITORY"], "github.sha": github["GITHUB_SHA"]}
    for name, spec in action["inputs"].items():
        value = given.get(name, str(spec.get("default", "")))
        context[f"inputs.{name}"] = _substitute(value, context)
    return context


def test_github_action_in_a_users_repository(user_venv, wheel, user_repo, tmp_path, forgetful_log):
    [action] = _yaml(REPO / "action.yml")
    given = {"logs": "eval-logs/*.json", "policy": "preset:starter", "clgate-version": __version__}
    for attempt, check in ((1, "first"), (2, "regression")):
        github = _github_env(user_repo, tmp_path / str(attempt))
        env = _platform_env(user_venv, wheel, user_repo, github)
        context = _action_context(action, given, github)
        done = _run_github_steps(action["runs"]["steps"], env, user_repo, context)
        outputs = dict(
            line.split("=", 1) for line in Path(github["GITHUB_OUTPUT"]).read_text().splitlines() if line
        )
        if check == "first":
            _check_first_run(done, user_repo, "clgate-out", Path(github["GITHUB_STEP_SUMMARY"]))
            assert outputs == {
                "verdict": "PASS",
                "report": "clgate-out/report.html",
                "junit": "clgate-out/junit.xml",
            }
            _promote_and_regress(user_repo, forgetful_log)
        else:
            _check_regression(done, user_repo, "clgate-out")
            assert outputs["verdict"] == "FAIL"


def _gitlab_env(repo: Path) -> dict[str, str]:
    return {
        "GITLAB_CI": "true",
        "CI_PROJECT_DIR": str(repo),
        "CI_PROJECT_PATH": "acme/vision",
        "CI_COMMIT_SHA": SHA,
        "CI_PIPELINE_URL": "https://gitlab.com/acme/vision/-/pipelines/88",
        "CI_PIPELINE_SOURCE": "merge_request_event",
    }


def _run_gitlab_job(job: dict[str, Any], venv: Path, wheel: Path, repo: Path):
    """The job's variables expanded against the CI's, then its script lines in one shell, in order."""
    env = _platform_env(venv, wheel, repo, _gitlab_env(repo))
    for name, value in (job.get("variables") or {}).items():
        env[name] = os.path.expandvars(str(value)) if "$" in str(value) else str(value)
        env[name] = re.sub(r"\$(\w+)", lambda m: env.get(m.group(1), ""), env[name])
    return _run_script("\n".join(job["script"]), repo, env)


def _component_job(given: dict[str, str]) -> dict[str, Any]:
    spec, _ = _yaml(REPO / "templates" / "clgate-gate.yml")
    inputs = {k: str(v.get("default", "")).lower() if isinstance(v.get("default"), bool)
              else str(v.get("default", "")) for k, v in spec["spec"]["inputs"].items()}  # fmt: skip
    inputs.update(given)
    text = (REPO / "templates" / "clgate-gate.yml").read_text(encoding="utf-8").split("\n---\n", 1)[1]
    text = _GITLAB_INPUT.sub(lambda m: inputs[m.group(1)], text)
    [jobs] = _yaml_text(text)
    return jobs["clgate-gate"]


def _yaml_text(text: str) -> list[Any]:
    from ruamel.yaml import YAML

    return list(YAML(typ="safe", pure=True).load_all(text))


@pytest.mark.parametrize("how", ["init", "component"])
def test_gitlab_ci_in_a_users_repository(how, user_venv, wheel, user_repo, forgetful_log):
    if how == "init":
        _init(user_venv, user_repo, "gitlab")
        [doc] = _yaml(user_repo / ".gitlab-ci.yml")
        job = doc["clgate-gate"]
    else:
        job = _component_job({"policy": "preset:starter", "clgate-version": __version__})
    run: Callable[[], subprocess.CompletedProcess[str]] = lambda: _run_gitlab_job(  # noqa: E731
        job, user_venv, wheel, user_repo
    )
    done = run()
    _check_first_run(done, user_repo, "gate-out", user_repo / "gate-out" / "summary.md")
    _promote_and_regress(user_repo, forgetful_log)
    _check_regression(run(), user_repo, "gate-out")


def test_release_workflow_build_job_runs(tmp_path, checkout_copier):
    """The release's build job, its shell steps in order on a copy of the checkout at a v<version> tag:
    build, twine check, the tag is the version, the wheel in a clean venv gates the shipped example."""
    import sys

    [workflow] = _yaml(REPO / ".github" / "workflows" / "release.yml")
    source = checkout_copier(tmp_path / "source")
    runner_temp = tmp_path / "runner-temp"
    runner_temp.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",  # the runner's python
        RUNNER_TEMP=str(runner_temp),
        GITHUB_REF="refs/tags/v" + __version__,
        GITHUB_REF_NAME="v" + __version__,
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    for step in workflow["jobs"]["build"]["steps"]:
        if "run" not in step:
            continue
        assert (
            step.get("if", "startsWith(github.ref, 'refs/tags/v')") == "startsWith(github.ref, 'refs/tags/v')"
        )
        done = _run_script(step["run"], source, env)
        assert done.returncode == 0, f"{step.get('name')}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert sorted(p.name for p in (source / "dist").iterdir()) == [
        f"clgate-{__version__}-py3-none-any.whl",
        f"clgate-{__version__}.tar.gz",
    ]
    assert json.loads((runner_temp / "gate-out" / "decision.json").read_text())["policy_name"] == "starter"
    env["GITHUB_REF_NAME"] = "v9.9.9"  # a tag that is not the version stops the release
    tag_step = next(s for s in workflow["jobs"]["build"]["steps"] if s.get("name", "").startswith("The tag"))
    assert _run_script(tag_step["run"], source, env).returncode == 1
