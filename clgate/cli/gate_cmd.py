"""``clgate gate`` (judge evaluation logs, or a job run first, against a policy) and ``clgate demo``.

Exit codes: 0 PASS (and WARN unless ``--fail-on-warn``), 1 FAIL (or WARN with ``--fail-on-warn``),
2 invalid input or usage (bad policy, bad log, a rule that cannot be evaluated: verdict ERROR),
3 internal error.
"""

from __future__ import annotations

import datetime
import platform
import sys
import time
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from clgate._version import __version__
from clgate.cli.extras import require_extra
from clgate.cli.metrics_cmd import warn_plugins
from clgate.cli.mlflow_opts import (
    Alias,
    MlflowExperiment,
    MlflowUri,
    ModelUri,
    mlflow_target,
    report_to_mlflow,
)

if TYPE_CHECKING:
    from clgate.gate import GateResult
    from clgate.metrics.arrays import LogArrays
    from clgate.policy import Policy
    from clgate.schemas.decision import Decision
    from clgate.schemas.job import JobSpec

DEMO_POLICY = "examples/policies/digits-release.yaml"
DEMO_JOBS = {"finetune": "examples/jobs/digits-finetune.yaml", "er": "examples/jobs/digits-er.yaml"}


class InputRejected(typer.Exit):
    """An input the gate cannot use (exit 2); carries the message for the JUnit/Markdown outputs."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(code)
        self.message = message


def _fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise InputRejected(message, code)


def repo_file(relative: str) -> Path:
    """A shipped example (``examples/…``): the working directory's copy if there is one, else the
    package's."""
    here = Path(relative)
    if here.exists():
        return here
    inside = relative.removeprefix("examples/")
    return Path(str(files("clgate.examples").joinpath(inside)))


def _load_policy(path: Path) -> Policy:
    # lazy: CLI — `clgate --help` loads no command's dependencies
    from clgate.policy import PolicyError, load_policy
    from clgate.presets import PresetError, resolve_policy

    try:
        return load_policy(resolve_policy(str(path)))
    except (PolicyError, PresetError) as exc:
        _fail(str(exc))
    raise AssertionError  # unreachable


def _without_baseline_rules(policy: Policy, baseline_path: Path | None) -> tuple[Policy, list[str]]:
    """The policy less its regression rules, for a first release whose baseline does not exist yet."""
    skipped = [rule.id or f"rules[{i}]" for i, rule in enumerate(policy.rules) if rule.kind == "baseline"]
    where = f"{baseline_path} does not exist" if baseline_path is not None else "no --baseline given"
    if skipped and len(skipped) == len(policy.rules):
        _fail(
            f"--baseline-optional: {where} and every rule of policy {policy.name} compares against a "
            "baseline: nothing left to judge (use a policy with floors for a first release)"
        )
    if not skipped:
        return policy, []
    kept = [rule for rule in policy.rules if rule.kind != "baseline"]
    target = baseline_path if baseline_path is not None else "the baseline path"
    typer.echo(
        f"warning: no baseline yet ({where}): judged without the regression rule(s) "
        f"{', '.join(skipped)}; promote a released log to {target} to enable them",
        err=True,
    )
    return policy.model_copy(update={"rules": kept}), skipped


def _ci_provenance(candidate: str | None, candidate_version: str | None) -> dict[str, Any]:
    """The candidate (from the flags) and the build (from the CI's variables) for the provenance."""
    import os

    # lazy: CLI — `clgate --help` loads no command's dependencies
    from clgate.provenance import build_info, candidate_info

    try:
        named = candidate_info(candidate, candidate_version)
        build = build_info(os.environ)
    except ValueError as exc:
        _fail(str(exc))
    found: dict[str, Any] = {}
    if named is not None:
        found["candidate"] = named
    if build is not None:
        found["build"] = build
    return found


def _load_log(path: Path) -> LogArrays:
    """A log (JSON, JSON Lines or ``.npz``) read straight into arrays, with its header and hash."""
    # lazy: CLI — `clgate --help` loads no command's dependencies
    from clgate.logfile import read_log
    from clgate.schemas.evaluation_log import EvaluationLogError

    try:
        return read_log(path)
    except EvaluationLogError as exc:
        _fail(str(exc))
    raise AssertionError  # unreachable


def print_decision(decision: Decision, *, title: str | None = None, file: Any = None) -> None:
    """The decision table (rich): one row per rule, then the verdict and its reasons."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    # lazy: CLI — `clgate --help` loads no command's dependencies
    from clgate.fmt import printable
    from clgate.reports import (
        column_word,
        evidence_text,
        fmeca_note,
        fmt,
        threshold_text,
        worst_moment_text,
        worst_pooled_text,
    )

    def inert(text: str) -> str:  # a name from a user's file: no control character, no rich markup
        return escape(printable(text))

    console = Console(file=file or sys.stdout, width=max(100, Console().width))
    style = {"pass": "green", "warn": "yellow", "fail": "red", "error": "magenta"}
    table = Table(
        title=inert(title or f"policy {decision.policy_name} v{decision.policy_version}"), show_lines=False
    )
    for col in ("status", "#", "rule", "value", "threshold", "margin", "evidence"):
        table.add_column(col, justify="right" if col in ("#", "value", "margin") else "left")
    for r in decision.rules:
        ev = evidence_text(r.evidence, column=column_word(decision)) if r.status != "error" else r.message
        sev = " (warn)" if r.severity == "warn" else ""
        table.add_row(
            f"[{style[r.status]}]{r.status.upper()}[/]",
            str(r.index),
            inert(r.id + sev),
            fmt(r.value) if r.status != "error" else "—",
            threshold_text(r),
            fmt(r.margin),
            inert(ev),
        )
    console.print(table)
    for err in decision.errors:
        console.print(f"[magenta]error:[/] {inert(err)}", markup=True, highlight=False)
    color = {"PASS": "green", "WARN": "yellow", "FAIL": "red", "ERROR": "magenta"}[decision.verdict]
    console.print(
        f"[bold {color}]{decision.verdict}[/] {inert(decision.summary.split(': ', 1)[-1])}", highlight=False
    )
    if decision.headline.worst_moment is not None:
        console.print(
            f"worst {column_word(decision)} at its worst moment: {inert(worst_moment_text(decision))}",
            highlight=False,
        )
    pooled = worst_pooled_text(decision)
    if pooled:
        console.print(f"worst class pooled over its cells: {inert(pooled)}", highlight=False)
    note = fmeca_note(decision)
    if note:
        console.print(f"[yellow]FMECA:[/] {inert(note)}", highlight=False)


def _environment() -> dict[str, Any]:
    """Where and when the gate ran (for the audit trail; not part of the decision's hashes)."""
    import numpy  # lazy: numpy — `clgate --help` does not load it

    return {
        "gated_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "versions": {"clgate": __version__, "python": platform.python_version(), "numpy": numpy.__version__},
    }


def _run_job(job: Path, out: Path, overrides: list[str]) -> list[Path]:
    require_extra("engine", "clgate gate --job")
    # lazy: CLI — `clgate --help` loads no command's dependencies
    from clgate.documents import load_job, parse_overrides
    from clgate.schemas.job import JobSpecError

    try:
        spec = load_job(job)
        if overrides:
            spec = spec.with_overrides(parse_overrides(overrides))
    except JobSpecError as exc:
        _fail(str(exc))
    except ValueError as exc:
        _fail(f"{job}: {exc}")
    typer.echo(f"running job {job} …", err=True)
    return _run_within_limits(spec, out / "logs", job.parent.resolve())


def _run_within_limits(spec: JobSpec, out: Path, base_dir: Path) -> list[Path]:
    """``clgate run``'s handling of a job: the data held to the ``CLGATE_MAX_*`` limits (as the service
    holds an uploaded job), and a job its data refuses named with exit 2, not reported as a bug."""
    # lazy: torch — CLI: `clgate --help` loads no command's dependencies
    from clgate.cli.engine_cmd import run_engine_job
    from clgate.engine import EngineInputError
    from clgate.engine.data import DataLimits, data_limits

    try:
        with data_limits(DataLimits.from_env()):  # a bad CLGATE_MAX_* value is an input error too
            return run_engine_job(spec, out, base_dir=base_dir)
    except EngineInputError as exc:
        _fail(str(exc))
    except OSError as exc:  # an unreadable input or an unwritable --out folder
        _fail(f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "))


# The options that name the build a verdict certifies, and a first release without a baseline.
Candidate = Annotated[
    str | None,
    typer.Option("--candidate", help="The candidate model's name, printed on the report and recorded."),
]
CandidateVersion = Annotated[
    str | None,
    typer.Option("--candidate-version", help="The candidate model's version (with --candidate)."),
]
BaselineOptional = Annotated[
    bool,
    typer.Option(
        "--baseline-optional",
        help="A --baseline file that does not exist yet (first release) is no error: the policy's "
        "regression rules are left out, and the report says so.",
    ),
]


def gate_command(
    logs_args: Annotated[
        list[Path] | None,
        typer.Argument(
            metavar="LOG", help="More evaluation logs (so that --log runs/*.json works).", show_default=False
        ),
    ] = None,
    log: Annotated[
        list[Path] | None,
        typer.Option(
            "--log", "-l", help="Evaluation log; repeatable. Several logs = several seeds of one job."
        ),
    ] = None,
    job: Annotated[
        Path | None, typer.Option("--job", help="Run this job spec first (engine), then gate its logs.")
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a job field (with --job), e.g. strategy.name=er."),
    ] = None,
    policy_path: Annotated[
        Path | None, typer.Option("--policy", "-p", help="Policy (clgate.policy/v1, YAML or JSON). Required.")
    ] = None,
    baseline_path: Annotated[
        Path | None, typer.Option("--baseline", help="Baseline log for regression rules.")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="Write report.html/.md, decision.json, metrics.json, fmeca.csv, junit.xml here.",
        ),
    ] = None,
    junit: Annotated[Path | None, typer.Option("--junit", help="Also write the JUnit XML here.")] = None,
    summary_md: Annotated[
        Path | None,
        typer.Option(
            "--summary-md", help="Also write the Markdown summary here (e.g. $GITHUB_STEP_SUMMARY)."
        ),
    ] = None,
    fail_on_warn: Annotated[bool, typer.Option("--fail-on-warn", help="Exit 1 on WARN too.")] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the decision as JSON instead of the table.")
    ] = False,
    pdf: Annotated[
        bool,
        typer.Option(
            "--pdf", help="Also print report.html to report.pdf beside it (headless Chromium; needs --out)."
        ),
    ] = False,
    report_url: Annotated[
        str | None,
        typer.Option("--report-url", help="Where report.html will be served: report.md links to it."),
    ] = None,
    candidate: Candidate = None,
    candidate_version: CandidateVersion = None,
    baseline_optional: BaselineOptional = False,
    mlflow_uri: MlflowUri = None,
    mlflow_experiment: MlflowExperiment = "clgate",
    model_uri: ModelUri = None,
    alias: Alias = None,
) -> None:
    """Judge evaluation logs (or a job, run first) against a policy: PASS / WARN / FAIL / ERROR.

    Exit codes: 0 PASS (and WARN unless --fail-on-warn), 1 FAIL, 2 invalid input or usage, 3 internal error.
    """
    _gate(GateArgs(**locals()))


@dataclass
class GateArgs:
    """``clgate gate``'s options, as given."""

    logs_args: list[Path] | None
    log: list[Path] | None
    job: Path | None
    set_: list[str] | None
    policy_path: Path | None
    baseline_path: Path | None
    out: Path | None
    junit: Path | None
    summary_md: Path | None
    fail_on_warn: bool
    as_json: bool
    pdf: bool
    report_url: str | None
    candidate: str | None
    candidate_version: str | None
    baseline_optional: bool
    mlflow_uri: str | None
    mlflow_experiment: str
    model_uri: str | None
    alias: str | None


def _check_usage(a: GateArgs, log_paths: list[Path]) -> Path:
    """The option combinations that cannot work (exit 2); returns the policy path."""
    if a.job is not None and log_paths:
        _fail("give either --log LOG… or --job SPEC, not both")
    if a.job is None and not log_paths:
        _fail("nothing to gate: give --log LOG (repeatable) or --job SPEC.yaml")
    if a.set_ and a.job is None:
        _fail("--set applies to --job only")
    if a.policy_path is None:
        _fail("--policy POLICY.yaml is required")
    if a.pdf and a.out is None:
        _fail("--pdf needs --out DIR (the PDF is written beside report.html)")
    assert a.policy_path is not None
    return a.policy_path


def _load_inputs(a: GateArgs, log_paths: list[Path]) -> dict[str, Any]:
    """Policy, baseline and logs (running the job first with --job); an input error still writes the
    JUnit file and the summary, so CI says why nothing was judged."""
    policy_path = _check_usage(a, log_paths)
    baseline_path = a.baseline_path
    skipped: list[str] = []
    try:
        build = _ci_provenance(a.candidate, a.candidate_version)
        policy = _load_policy(policy_path)
        if a.baseline_optional and (baseline_path is None or not baseline_path.exists()):
            policy, skipped = _without_baseline_rules(policy, baseline_path)
            baseline_path = None
        baseline = _load_log(baseline_path) if baseline_path is not None else None
        if a.job is not None:
            if not a.job.exists():
                _fail(f"--job: {a.job} does not exist")
            log_paths = _run_job(a.job, a.out or Path("clgate-out"), list(a.set_ or []))
        logs = [_load_log(p) for p in log_paths]
    except InputRejected as exc:
        # lazy: CLI — `clgate --help` loads no command's dependencies
        from clgate.reports import render_input_error_junit, render_input_error_markdown

        _write_text(a.junit, render_input_error_junit(exc.message))
        _append_text(a.summary_md, render_input_error_markdown(exc.message))
        raise
    provenance = {
        **_environment(),
        "command": "clgate gate",
        "logs": [str(p) for p in log_paths],
        "policy_file": str(policy_path),
        "baseline_file": str(baseline_path) if baseline_path else None,
        "job": str(a.job) if a.job else None,
        **build,
    }
    if skipped:
        provenance["skipped_without_baseline"] = skipped
    return {"logs": logs, "policy": policy, "baseline": baseline, "provenance": provenance}


def _gate(a: GateArgs) -> None:
    # lazy: CLI — `clgate --help` loads no command's dependencies
    from clgate.gate import gate_logs
    from clgate.schemas.vocab import exit_code

    mlflow = mlflow_target(a.mlflow_uri, a.mlflow_experiment, a.model_uri, a.alias)
    inputs = _load_inputs(a, list(a.log or []) + list(a.logs_args or []))
    result = gate_logs(
        inputs["logs"],
        inputs["policy"],
        baseline=inputs["baseline"],
        out_dir=a.out,
        provenance=inputs["provenance"],
        report_url=a.report_url,
    )
    warn_plugins(result.metrics)  # broken plug-ins, named (the verdict already judged their rules)
    _write_extras(result, a.junit, a.summary_md, a.report_url)
    if a.pdf:
        _write_pdf(result)
    if a.as_json:
        typer.echo(result.decision.model_dump_json(indent=2))
    else:
        print_decision(result.decision)
        _print_build(result.decision.provenance)
        if result.files:
            typer.echo(
                f"reports: {result.files['report.html'].parent}/ (report.html, report.md, decision.json, "
                "metrics.json, fmeca.csv, junit.xml)"
            )
    # reported on stderr if MLflow fails; the exit code stays
    report_to_mlflow(mlflow, result, a.out, inputs["policy"].move_alias_on)
    raise typer.Exit(exit_code(result.decision.verdict, fail_on_warn=a.fail_on_warn))


def _print_build(provenance: dict[str, Any]) -> None:
    """The build the verdict certifies (candidate, commit, CI run), when known."""
    # lazy: CLI — `clgate --help` loads no command's dependencies
    from clgate.provenance import build_label, candidate_label

    parts = [p for p in (candidate_label(provenance), build_label(provenance)) if p]
    run_url = (provenance.get("build") or {}).get("run_url")
    if run_url:
        parts.append(f"run {run_url}")
    if parts:
        typer.echo("certifies: " + " · ".join(parts))


def _write_text(path: Path | None, text: str) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def _append_text(path: Path | None, text: str) -> None:
    # append: $GITHUB_STEP_SUMMARY is shared by the steps of a job
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as fh:
            fh.write(text)


def _write_extras(
    result: GateResult, junit: Path | None, summary_md: Path | None, report_url: str | None
) -> None:
    # lazy: CLI — `clgate --help` loads no command's dependencies
    from clgate.reports import render_junit, render_markdown

    written = result.files.get("junit.xml")  # the same file as in --out (its time and timestamp)
    _write_text(junit, written.read_text(encoding="utf-8") if written else render_junit(result.decision))
    _append_text(summary_md, render_markdown(result.decision, report_url=report_url))


def _write_pdf(result: GateResult) -> None:
    """report.pdf beside report.html; without Chromium, say so on stderr and go on (the verdict stands)."""
    # lazy: CLI — `clgate --help` loads no command's dependencies
    from clgate.reports import PdfError, write_pdf

    try:
        result.files["report.pdf"] = write_pdf(result.files["report.html"])
    except PdfError as exc:
        typer.echo(f"warning: report.pdf not written: {exc}", err=True)


def demo_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="Where the two reports go.")] = Path("clgate-out"),
    policy_path: Annotated[
        Path | None,
        typer.Option(
            "--policy",
            "-p",
            help=f"Policy for both runs (a file or preset:NAME); without it, the shipped {DEMO_POLICY}.",
        ),
    ] = None,
    pdf: Annotated[
        bool, typer.Option("--pdf", help="Also write report.pdf beside each report.html (Chromium).")
    ] = False,
) -> None:
    """Run finetune and ER on the bundled digits, gate both with the example policy, write both reports.

    No server, CPU only, well under a minute here. ER is expected to PASS and finetune to FAIL: it
    forgets every old class (MICA and min-ACC fall to 0).
    """
    # lazy: CLI — `clgate --help` loads no command's dependencies
    from clgate.cli.engine_cmd import run_engine_job
    from clgate.documents import load_job
    from clgate.gate import gate_logs
    from clgate.schemas.job import JobSpecError

    policy_file = policy_path or repo_file(DEMO_POLICY)
    if not str(policy_file).startswith("preset:") and not policy_file.exists():
        _fail(f"demo policy {policy_file} not found (run from the repository, or pass --policy)")
    policy = _load_policy(policy_file)
    jobs = {name: repo_file(path) for name, path in DEMO_JOBS.items()}
    for job_file in jobs.values():
        if not job_file.exists():
            _fail(f"demo job {job_file} not found (run from the repository)")
    verdicts: dict[str, str] = {}
    reports: dict[str, Path] = {}
    for strategy, job_file in jobs.items():
        t0 = time.perf_counter()
        try:
            spec = load_job(job_file)
        except JobSpecError as exc:
            _fail(str(exc))
        run_dir = out / strategy
        typer.echo(f"==> {strategy}: continual training on digits ({job_file}) …", err=True)
        paths = run_engine_job(spec, run_dir / "logs", base_dir=job_file.parent.resolve())
        logs = [_load_log(p) for p in paths]
        provenance = {
            **_environment(),
            "command": "clgate demo",
            "strategy": strategy,
            "job_file": str(job_file),
            "policy_file": str(policy_file),
            "logs": [str(p) for p in paths],
        }
        result = gate_logs(logs, policy, out_dir=run_dir, provenance=provenance)
        if pdf:
            _write_pdf(result)
        print_decision(result.decision, title=f"{strategy}: policy {policy.name} v{policy.version}")
        typer.echo(
            f"    {strategy} report: {result.files['report.html']}  ({time.perf_counter() - t0:.0f} s)\n"
        )
        verdicts[strategy] = result.decision.verdict
        reports[strategy] = result.files["report.html"]
    typer.echo("demo verdicts: " + ", ".join(f"{s} {v}" for s, v in verdicts.items()))
    for strategy, path in reports.items():
        typer.echo(f"  {strategy:9s} {path}  (also report.md, decision.json, fmeca.csv, junit.xml beside it)")


def register(app: typer.Typer) -> None:
    """Add ``gate`` and ``demo`` to the root app."""
    app.command("gate", no_args_is_help=True)(gate_command)
    app.command("demo")(demo_command)
