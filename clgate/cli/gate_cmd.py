"""``clgate gate`` (judge evaluation logs, or a job run first, against a policy) and ``clgate demo``.

Exit codes: 0 PASS (and WARN unless ``--fail-on-warn``), 1 FAIL (or WARN with ``--fail-on-warn``),
2 invalid input or usage (bad policy, bad log, a rule that cannot be evaluated: verdict ERROR),
3 internal error.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from clgate.gate import GateResult
    from clgate.policy import Policy
    from clgate.schemas.decision import Decision
    from clgate.schemas.evaluation_log import EvaluationLog

DEMO_POLICY = "examples/policies/digits-release.yaml"
DEMO_JOBS = {"finetune": "examples/jobs/digits-finetune.yaml", "er": "examples/jobs/digits-er.yaml"}


class InputRejected(typer.Exit):
    """An input the gate cannot use (exit 2); carries the message for the JUnit/Markdown outputs."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(code)
        self.message = message


def _fail(message: str, code: int = 2) -> None:
    typer.echo(f"error: {message}", err=True)
    raise InputRejected(message, code)


def repo_file(relative: str) -> Path:
    """A shipped example (``examples/…``): the working directory's copy if there is one, else the
    package's."""
    here = Path(relative)
    if here.exists():
        return here
    from importlib.resources import files

    inside = relative.removeprefix("examples/")
    return Path(str(files("clgate.examples").joinpath(inside)))


def _load_policy(path: Path) -> Policy:
    from clgate.policy import PolicyError, load_policy

    try:
        return load_policy(path)
    except PolicyError as exc:
        _fail(str(exc))
    raise AssertionError  # unreachable


def _load_log(path: Path) -> EvaluationLog:
    from clgate.schemas.evaluation_log import EvaluationLog, EvaluationLogError

    try:
        return EvaluationLog.load(path)
    except EvaluationLogError as exc:
        _fail(str(exc))
    raise AssertionError  # unreachable


def print_decision(decision: Decision, *, title: str | None = None, file: Any = None) -> None:
    """The decision table (rich): one row per rule, then the verdict and its reasons."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from clgate.fmt import printable
    from clgate.reports import evidence_text, fmeca_note, fmt, threshold_text, worst_moment_text

    def inert(text: str) -> str:  # a name from a user's file: no control character, no rich markup
        return escape(printable(text))

    console = Console(file=file or sys.stdout, width=max(100, Console().width))
    style = {"pass": "green", "warn": "yellow", "fail": "red", "error": "magenta"}
    table = Table(
        title=inert(title or f"policy {decision.policy_name} v{decision.policy_version}"), show_lines=False
    )
    for col, kw in (
        ("status", {}),
        ("#", {"justify": "right"}),
        ("rule", {}),
        ("value", {"justify": "right"}),
        ("threshold", {}),
        ("margin", {"justify": "right"}),
        ("evidence", {}),
    ):
        table.add_column(col, **kw)
    for r in decision.rules:
        ev = evidence_text(r.evidence) if r.status != "error" else r.message
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
            f"worst class at its worst moment: {inert(worst_moment_text(decision))}", highlight=False
        )
    note = fmeca_note(decision)
    if note:
        console.print(f"[yellow]FMECA:[/] {inert(note)}", highlight=False)


def _environment() -> dict[str, Any]:
    """Where and when the gate ran (for the audit trail; not part of the decision's hashes)."""
    import datetime
    import platform

    import numpy

    from clgate import __version__

    return {
        "gated_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "versions": {"clgate": __version__, "python": platform.python_version(), "numpy": numpy.__version__},
    }


def _run_job(job: Path, out: Path, overrides: list[str]) -> list[Path]:
    from clgate.cli.extras import require_extra

    require_extra("engine", "clgate gate --job")
    from clgate.engine import run_job
    from clgate.schemas.job import JobSpec, JobSpecError

    try:
        spec = JobSpec.load(job)
        if overrides:
            spec = spec.with_overrides(overrides)
    except JobSpecError as exc:
        _fail(str(exc))
    except ValueError as exc:
        _fail(f"{job}: {exc}")
    typer.echo(f"running job {job} …", err=True)
    return run_job(spec, out / "logs", base_dir=job.parent.resolve())


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
) -> None:
    """Judge evaluation logs (or a job, run first) against a policy: PASS / WARN / FAIL / ERROR.

    Exit codes: 0 PASS (and WARN unless --fail-on-warn), 1 FAIL, 2 invalid input or usage, 3 internal error.
    """
    log_paths = list(log or []) + list(logs_args or [])
    if job is not None and log_paths:
        _fail("give either --log LOG… or --job SPEC, not both")
    if job is None and not log_paths:
        _fail("nothing to gate: give --log LOG (repeatable) or --job SPEC.yaml")
    if set_ and job is None:
        _fail("--set applies to --job only")
    if policy_path is None:
        _fail("--policy POLICY.yaml is required")
    if pdf and out is None:
        _fail("--pdf needs --out DIR (the PDF is written beside report.html)")
    assert policy_path is not None
    try:
        policy = _load_policy(policy_path)
        baseline = _load_log(baseline_path) if baseline_path is not None else None
        if job is not None:
            if not job.exists():
                _fail(f"--job: {job} does not exist")
            log_paths = _run_job(job, out or Path("clgate-out"), list(set_ or []))
        logs = [_load_log(p) for p in log_paths]
    except InputRejected as exc:
        # CI still gets a JUnit file and a summary that say why nothing was judged
        from clgate.reports import render_input_error_junit, render_input_error_markdown

        _write_text(junit, render_input_error_junit(exc.message))
        _append_text(summary_md, render_input_error_markdown(exc.message))
        raise

    from clgate.gate import gate_logs

    provenance = {
        **_environment(),
        "command": "clgate gate",
        "logs": [str(p) for p in log_paths],
        "policy_file": str(policy_path),
        "baseline_file": str(baseline_path) if baseline_path else None,
        "job": str(job) if job else None,
    }
    result = gate_logs(
        logs, policy, baseline=baseline, out_dir=out, provenance=provenance, report_url=report_url
    )
    _write_extras(result, junit, summary_md, report_url)
    if pdf:
        _write_pdf(result)
    if as_json:
        typer.echo(result.decision.model_dump_json(indent=2))
    else:
        print_decision(result.decision)
        if result.files:
            typer.echo(
                f"reports: {result.files['report.html'].parent}/ (report.html, report.md, decision.json, "
                "metrics.json, fmeca.csv, junit.xml)"
            )
    from clgate.schemas.vocab import exit_code

    raise typer.Exit(exit_code(result.decision.verdict, fail_on_warn=fail_on_warn))


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
    from clgate.reports import render_junit, render_markdown

    written = result.files.get("junit.xml")  # the same file as in --out (its time and timestamp)
    _write_text(junit, written.read_text(encoding="utf-8") if written else render_junit(result.decision))
    _append_text(summary_md, render_markdown(result.decision, report_url=report_url))


def _write_pdf(result: GateResult) -> None:
    """report.pdf beside report.html; without Chromium, say so on stderr and go on (the verdict stands)."""
    from clgate.reports import PdfError, write_pdf

    try:
        result.files["report.pdf"] = write_pdf(result.files["report.html"])
    except PdfError as exc:
        typer.echo(f"warning: report.pdf not written: {exc}", err=True)


def demo_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="Where the two reports go.")] = Path("clgate-out"),
    policy_path: Annotated[
        Path | None,
        typer.Option("--policy", "-p", help=f"Policy for both runs; without it, the shipped {DEMO_POLICY}."),
    ] = None,
    pdf: Annotated[
        bool, typer.Option("--pdf", help="Also write report.pdf beside each report.html (Chromium).")
    ] = False,
) -> None:
    """Run finetune and ER on the bundled digits, gate both with the example policy, write both reports.

    No server, CPU only, well under a minute here. ER is expected to PASS and finetune to FAIL: it
    forgets every old class (MICA and min-ACC fall to 0).
    """
    from clgate.engine import run_job
    from clgate.gate import gate_logs
    from clgate.schemas.job import JobSpec, JobSpecError

    policy_file = policy_path or repo_file(DEMO_POLICY)
    if not policy_file.exists():
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
            spec = JobSpec.load(job_file)
        except JobSpecError as exc:
            _fail(str(exc))
        run_dir = out / strategy
        typer.echo(f"==> {strategy}: continual training on digits ({job_file}) …", err=True)
        paths = run_job(spec, run_dir / "logs", base_dir=job_file.parent.resolve())
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
