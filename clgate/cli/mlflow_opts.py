"""``clgate gate --mlflow-uri …``: the options and the one call that send a decision to MLflow.

A failure to reach MLflow is printed and never changes the exit code, which stays the verdict's.
"""

from __future__ import annotations

import tempfile
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from clgate.policy import GateResult

MlflowUri = Annotated[
    str | None,
    typer.Option(
        "--mlflow-uri",
        help="Log the decision to this MLflow tracking server (needs the mlflow extra).",
    ),
]
MlflowExperiment = Annotated[str, typer.Option("--mlflow-experiment", help="MLflow experiment of the run.")]
ModelUri = Annotated[
    str | None,
    typer.Option("--model-uri", help="The candidate as a registered version, models:/NAME/VERSION: tagged."),
]
Alias = Annotated[
    str | None,
    typer.Option(
        "--alias",
        help=(
            "Registry alias (e.g. champion) moved to --model-uri on PASS "
            "(or the verdicts of the policy's registry.move_alias_on)."
        ),
    ),
]


@dataclass(frozen=True)
class MlflowTarget:
    uri: str
    experiment: str
    model_uri: str | None
    alias: str | None


def mlflow_target(
    uri: str | None, experiment: str, model_uri: str | None, alias: str | None
) -> MlflowTarget | None:
    """The checked options (exit 2 on a bad combination), or ``None`` without ``--mlflow-uri``."""
    # lazy: mlflow — the optional clgate[mlflow] extra, only with --mlflow-uri
    from clgate.integrations.mlflow import parse_model_uri

    if uri is None:
        if model_uri or alias:
            raise typer.BadParameter("--model-uri and --alias need --mlflow-uri")
        return None
    if alias and not model_uri:
        raise typer.BadParameter("--alias needs --model-uri models:/NAME/VERSION (the version it moves to)")
    if model_uri:
        try:
            parse_model_uri(model_uri)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
    return MlflowTarget(uri, experiment, model_uri, alias)


def report_to_mlflow(
    target: MlflowTarget | None,
    result: GateResult,
    out: Path | None,
    move_alias_on: Collection[str] = ("PASS",),
) -> None:
    """Log ``result`` to MLflow; say what was done or why it failed (on stderr), never raise. The alias
    moves on the verdicts ``move_alias_on`` (the policy's ``registry.move_alias_on``)."""
    if target is None:
        return
    # lazy: mlflow — the optional clgate[mlflow] extra, only with --mlflow-uri
    from clgate.integrations.mlflow import MlflowUnavailable, log_decision

    with tempfile.TemporaryDirectory(prefix="clgate-mlflow-") as scratch:
        report_dir = out
        if report_dir is None:  # no --out: the decision and metrics still go to the run
            report_dir = Path(scratch)
            (report_dir / "decision.json").write_text(result.decision.model_dump_json(indent=2))
            if result.metrics is not None:
                (report_dir / "metrics.json").write_text(result.metrics.model_dump_json(indent=2))
        try:
            outcome = log_decision(
                result.decision,
                result.metrics,
                report_dir,
                tracking_uri=target.uri,
                experiment=target.experiment,
                model_uri=target.model_uri,
                alias=target.alias,
                move_alias_on=move_alias_on,
            )
        except MlflowUnavailable as exc:
            typer.echo(f"warning: the decision was not logged to MLflow: {exc}", err=True)
            return
    typer.echo(f"mlflow: run {outcome.run_id} in experiment {outcome.experiment_id}", err=True)
    for note in outcome.notes:
        typer.echo(f"mlflow: {note}", err=True)
