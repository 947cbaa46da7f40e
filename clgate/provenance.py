"""Which build a verdict certifies: the candidate's name and version, the source commit and the CI run.

Pure (no framework): the commit and the run are read from the standard variables of the CI that runs the
gate, so a report, ``decision.json`` and the JUnit properties name the build without any flag.

>>> build_info({"GITHUB_SHA": "abc1234", "GITHUB_SERVER_URL": "https://github.com",
...             "GITHUB_REPOSITORY": "acme/vision", "GITHUB_RUN_ID": "42"})
{'ci': 'github', 'commit': 'abc1234', 'run_url': 'https://github.com/acme/vision/actions/runs/42'}
>>> build_info({"CI_COMMIT_SHA": "def4567", "CI_PIPELINE_URL": "https://gitlab.com/acme/vision/-/pipelines/7"})
{'ci': 'gitlab', 'commit': 'def4567', 'run_url': 'https://gitlab.com/acme/vision/-/pipelines/7'}
>>> build_info({}) is None
True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from clgate.schemas.api import BuildInfo
from clgate.schemas.errors import problems_of


def _github(env: Mapping[str, str]) -> str | None:
    parts = [env.get(k) for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID")]
    if not all(parts):
        return None
    server, repository, run_id = parts
    return f"{str(server).rstrip('/')}/{repository}/actions/runs/{run_id}"


# (CI name, variable that holds the commit, how to get the run's address), in the order they are tried
_SOURCES: tuple[tuple[str, str, Callable[[Mapping[str, str]], str | None]], ...] = (
    ("github", "GITHUB_SHA", _github),
    ("gitlab", "CI_COMMIT_SHA", lambda env: env.get("CI_PIPELINE_URL")),
    ("buildkite", "BUILDKITE_COMMIT", lambda env: env.get("BUILDKITE_BUILD_URL")),
    ("jenkins", "GIT_COMMIT", lambda env: env.get("BUILD_URL")),
)


def build_info(environ: Mapping[str, str]) -> dict[str, Any] | None:
    """``{"ci", "commit", "run_url"}`` from the first CI whose commit variable is set, else ``None``.

    GitHub Actions: ``GITHUB_SHA`` and ``GITHUB_SERVER_URL/GITHUB_REPOSITORY/actions/runs/GITHUB_RUN_ID``;
    GitLab: ``CI_COMMIT_SHA``, ``CI_PIPELINE_URL``; Buildkite: ``BUILDKITE_COMMIT``,
    ``BUILDKITE_BUILD_URL``; Jenkins: ``GIT_COMMIT``, ``BUILD_URL``. ``run_url`` is ``None`` when the
    CI's run variables are missing. The result is checked against the API's
    :class:`~clgate.schemas.api.BuildInfo` (what a job submitted to the service carries): a malformed
    variable raises ``ValueError`` naming it.

    >>> build_info({"GIT_COMMIT": "not a commit"})
    Traceback (most recent call last):
    ValueError: GIT_COMMIT (jenkins): commit: String should match pattern '^[0-9a-fA-F]{7,64}$'
    """
    for name, commit_var, run_url in _SOURCES:
        commit = (environ.get(commit_var) or "").strip()
        if commit:
            found = {"ci": name, "commit": commit, "run_url": run_url(environ) or None}
            try:
                BuildInfo.model_validate(found)
            except ValidationError as exc:
                raise ValueError(f"{commit_var} ({name}): {problems_of(exc)[0]}") from None
            return found
    return None


def candidate_info(name: str | None, version: str | None) -> dict[str, str] | None:
    """The candidate's name and version as given (``--candidate``, ``--candidate-version``), or ``None``.

    >>> candidate_info("defect-classifier", "2.4.0")
    {'name': 'defect-classifier', 'version': '2.4.0'}
    >>> candidate_info(None, "2.4.0")
    Traceback (most recent call last):
    ValueError: candidate version: give the candidate's name too (--candidate NAME)
    """
    name = (name or "").strip() or None
    version = (version or "").strip() or None
    if name is None and version is None:
        return None
    if name is None:
        raise ValueError("candidate version: give the candidate's name too (--candidate NAME)")
    return {"name": name, "version": version} if version else {"name": name}


def candidate_label(provenance: Mapping[str, Any]) -> str | None:
    """``"NAME VERSION"`` (or ``"NAME"``) from a decision's provenance, or ``None`` when it names none.

    >>> candidate_label({"candidate": {"name": "defect-classifier", "version": "2.4.0"}})
    'defect-classifier 2.4.0'
    """
    candidate = provenance.get("candidate")
    if not isinstance(candidate, Mapping) or not candidate.get("name"):
        return None
    version = candidate.get("version")
    return f"{candidate['name']} {version}" if version else str(candidate["name"])


def build_label(provenance: Mapping[str, Any]) -> str | None:
    """``"commit abc1234 (github)"`` from a decision's provenance, or ``None`` when no CI was seen.

    >>> build_label({"build": {"ci": "gitlab", "commit": "def4567890abc", "run_url": None}})
    'commit def4567890ab (gitlab)'
    """
    build = provenance.get("build")
    if not isinstance(build, Mapping) or not build.get("commit"):
        return None
    return f"commit {str(build['commit'])[:12]} ({build.get('ci', 'ci')})"
