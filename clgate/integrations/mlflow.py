"""Log a gate decision to MLflow, and mark the candidate model version in its registry.

One MLflow run per decision: the metrics (a per-task metric as a series whose step is the 1-based task,
a scalar as one value), the verdict and each rule's outcome as tags, the policy as params, and the
report files (``decision.json``, ``report.html`` …) as artifacts. When the candidate is a registered
model version (``models:/NAME/VERSION``), that version gets the tags ``clgate.verdict``,
``clgate.policy`` and ``clgate.run_id``, and the alias (``champion``) moves to it on the verdicts the
policy's ``registry.move_alias_on`` lists (PASS only by default; never ERROR). When the decision's
provenance names the candidate and its build (``clgate gate --candidate …`` in CI, or a service job's
provenance), the run is named after them and tagged ``clgate.candidate``, ``clgate.commit``,
``clgate.ci_run`` ….

The registry is a name and a record here: clgate never downloads nor loads an MLflow model. A failure
to reach MLflow raises :class:`MlflowUnavailable`; the caller reports it and keeps the verdict.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clgate.provenance import candidate_label
from clgate.schemas.decision import Decision
from clgate.schemas.metrics import RunsResult
from clgate.schemas.policy import DEFAULT_ALIAS_VERDICTS

MODEL_URI = re.compile(r"^models:/(?P<name>[^/@]+)/(?P<version>[0-9]+)$")
# how long clgate lets MLflow's HTTP client try (its defaults retry for minutes)
HTTP_SETTINGS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}


class MlflowUnavailable(RuntimeError):
    """MLflow could not be reached or refused a call; the message says which and why."""


@dataclass
class MlflowOutcome:
    """What was written: the run, and for a registered candidate its version and whether the alias moved."""

    run_id: str
    experiment_id: str
    model_name: str | None = None
    model_version: str | None = None
    alias_moved: bool = False
    notes: list[str] = field(default_factory=list)


def parse_model_uri(uri: str) -> tuple[str, str]:
    """``models:/NAME/VERSION`` → (name, version); anything else raises ``ValueError`` saying the form.

    >>> parse_model_uri("models:/digits/3")
    ('digits', '3')
    >>> parse_model_uri("runs:/abc/model")
    Traceback (most recent call last):
    ...
    ValueError: --model-uri: expected models:/NAME/VERSION (a registered model version), got 'runs:/abc/model'
    """
    match = MODEL_URI.match(uri)
    if match is None:
        raise ValueError(
            f"--model-uri: expected models:/NAME/VERSION (a registered model version), got {uri!r}"
        )
    return match["name"], match["version"]


def metric_series(metrics: RunsResult | None) -> dict[str, list[tuple[int, float]]]:
    """Each metric as ``[(step, value)]``: a per-task metric's step is its 1-based task, a scalar's 0;
    values that could not be computed (null) are left out.

    >>> from clgate.schemas.metrics import RunsResult
    >>> metric_series(RunsResult.model_construct(metrics={"acc": [0.9, None, 0.7], "wamica": 0.5, "x": None}))
    {'acc': [(1, 0.9), (3, 0.7)], 'wamica': [(0, 0.5)]}
    """
    out: dict[str, list[tuple[int, float]]] = {}
    for key, value in (metrics.metrics if metrics is not None else {}).items():
        if isinstance(value, list):
            points = [(i + 1, float(v)) for i, v in enumerate(value) if v is not None]
        else:
            points = [(0, float(value))] if value is not None else []
        if points:
            out[key] = points
    return out


def decision_tags(decision: Decision) -> dict[str, str]:
    """The verdict, its summary and each rule's status, value and threshold as MLflow tags."""
    tags = {
        "clgate.verdict": decision.verdict,
        "clgate.summary": decision.summary[:4000],
        "clgate.policy": f"{decision.policy_name}@{decision.policy_version}",
        "clgate.version": decision.clgate_version,
    }
    tags.update(build_tags(decision.provenance))
    for rule in decision.rules:
        key = "clgate.rule." + re.sub(r"[^A-Za-z0-9_.\-/ ]", "_", rule.id)[:200]
        tags[key] = f"{rule.status} value={rule.value} threshold={rule.threshold}"
    return tags


def build_tags(provenance: dict[str, Any]) -> dict[str, str]:
    """The candidate and build a decision certifies as MLflow tags (only those its provenance names).

    >>> build_tags({"candidate": {"name": "digits-mlp"}, "build": {"ci": "github", "commit": "1f2e3d4"}})
    {'clgate.candidate': 'digits-mlp', 'clgate.commit': '1f2e3d4', 'clgate.ci': 'github'}
    """
    candidate = provenance.get("candidate") or {}
    build = provenance.get("build") or {}
    fields = {
        "clgate.candidate": candidate.get("name"),
        "clgate.candidate_version": candidate.get("version"),
        "clgate.commit": build.get("commit"),
        "clgate.ci": build.get("ci"),
        "clgate.ci_run": build.get("run_url"),
    }
    return {k: str(v)[:5000] for k, v in fields.items() if v}


def run_name(decision: Decision) -> str:
    """``clgate NAME VERSION @COMMIT: VERDICT`` when the provenance names the candidate and build, else
    ``clgate POLICY@VERSION: VERDICT``.

    >>> d = Decision.model_construct(verdict="PASS", policy_name="release", policy_version="3", provenance={})
    >>> run_name(d)
    'clgate release@3: PASS'
    >>> d.provenance = {"candidate": {"name": "digits-mlp", "version": "2.4.0"}}
    >>> d.provenance["build"] = {"commit": "1f2e3d4a5b6c7d8e"}
    >>> run_name(d)
    'clgate digits-mlp 2.4.0 @1f2e3d4a5b6c: PASS'
    """
    candidate = candidate_label(decision.provenance)
    commit = (decision.provenance.get("build") or {}).get("commit")
    parts = [candidate] if candidate else []
    if commit:
        parts.append(f"@{str(commit)[:12]}")
    what = " ".join(parts) or f"{decision.policy_name}@{decision.policy_version}"
    return f"clgate {what}: {decision.verdict}"


@contextlib.contextmanager
def _bounded_http() -> Iterator[None]:
    """MLflow's HTTP retries bounded for the call (a user's own setting wins), restored after."""
    saved = {k: os.environ.get(k) for k in HTTP_SETTINGS}
    for k, v in HTTP_SETTINGS.items():
        os.environ.setdefault(k, v)
    try:
        yield
    finally:
        for k, old in saved.items():
            if old is None:
                os.environ.pop(k, None)


def _experiment(client: Any, name: str) -> str:
    found = client.get_experiment_by_name(name)
    return found.experiment_id if found is not None else client.create_experiment(name)


def _log_run(client: Any, run_id: str, decision: Decision, metrics: RunsResult | None) -> None:
    from mlflow.entities import Metric, Param, RunTag

    now = int(time.time() * 1000)
    points = [
        Metric(key, value, now, step)
        for key, series in metric_series(metrics).items()
        for step, value in series
    ]
    params = [
        Param("clgate.policy_name", decision.policy_name),
        Param("clgate.policy_version", decision.policy_version),
        Param("clgate.policy_sha256", decision.hashes.policy),
        Param("clgate.runs", str(decision.runs)),
    ]
    tags = [RunTag(k, v) for k, v in decision_tags(decision).items()]
    for start in range(0, len(points), 900):  # MLflow takes at most 1000 metrics per batch
        client.log_batch(run_id, metrics=points[start : start + 900])
    client.log_batch(run_id, params=params, tags=tags)


def log_decision(
    decision: Decision,
    metrics: RunsResult | None,
    report_dir: Path | None,
    *,
    tracking_uri: str,
    experiment: str = "clgate",
    model_uri: str | None = None,
    alias: str | None = None,
    move_alias_on: Collection[str] = DEFAULT_ALIAS_VERDICTS,
) -> MlflowOutcome:
    """Write the decision to the MLflow server at ``tracking_uri`` (see the module docstring);
    ``move_alias_on`` is the policy's ``registry.move_alias_on`` (ERROR is refused: ``ValueError``)."""
    model = parse_model_uri(model_uri) if model_uri else None
    if "ERROR" in move_alias_on:
        raise ValueError("move_alias_on: ERROR never moves the alias (an error certifies no release)")
    try:
        from mlflow import MlflowClient
    except ImportError:
        raise MlflowUnavailable(
            "the mlflow package is not installed (pip install 'clgate[mlflow]')"
        ) from None
    with _bounded_http():
        try:
            return _write(
                MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri),
                decision,
                metrics,
                report_dir,
                experiment,
                model,
                (alias, frozenset(move_alias_on)),
            )
        except Exception as exc:  # MlflowException, requests' errors …: reported, never fatal to the verdict
            reason = str(exc).splitlines()[0][:500] if str(exc) else type(exc).__name__
            raise MlflowUnavailable(f"MLflow at {tracking_uri}: {reason}") from exc


def _write(
    client: Any,
    decision: Decision,
    metrics: RunsResult | None,
    report_dir: Path | None,
    experiment: str,
    model: tuple[str, str] | None,
    alias: tuple[str | None, frozenset[str]],
) -> MlflowOutcome:
    experiment_id = _experiment(client, experiment)
    tags = {"mlflow.runName": run_name(decision)}
    if model is not None:
        tags["clgate.model_uri"] = f"models:/{model[0]}/{model[1]}"
    run = client.create_run(experiment_id, tags=tags)
    run_id = run.info.run_id
    outcome = MlflowOutcome(run_id=run_id, experiment_id=experiment_id)
    try:
        _log_run(client, run_id, decision, metrics)
        if report_dir is not None and report_dir.is_dir():
            client.log_artifacts(run_id, str(report_dir), artifact_path="clgate")
    finally:
        client.set_terminated(run_id, status="FINISHED")
    if model is not None:
        _mark_version(client, outcome, decision, model, alias)
    return outcome


def _mark_version(
    client: Any,
    outcome: MlflowOutcome,
    decision: Decision,
    model: tuple[str, str],
    alias_rule: tuple[str | None, frozenset[str]],
) -> None:
    name, version = model
    alias, move_on = alias_rule
    outcome.model_name, outcome.model_version = name, version
    for key, value in (
        ("clgate.verdict", decision.verdict),
        ("clgate.policy", f"{decision.policy_name}@{decision.policy_version}"),
        ("clgate.run_id", outcome.run_id),
        *build_tags(decision.provenance).items(),
    ):
        client.set_model_version_tag(name, version, key, value)
    if alias is None:
        return
    if decision.verdict in move_on:
        client.set_registered_model_alias(name, alias, version)
        outcome.alias_moved = True
        outcome.notes.append(f"alias {alias!r} of {name} now points to version {version}")
    else:
        outcome.notes.append(
            f"alias {alias!r} of {name} not moved: the verdict is {decision.verdict} "
            f"(the policy moves it on {', '.join(sorted(move_on))})"
        )
