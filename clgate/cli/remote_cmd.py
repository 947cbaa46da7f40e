"""``clgate remote …``: the clgate service from the command line (submit, wait, results, jobs, cancel,
waive, policies, baselines), configured by ``CLGATE_URL`` and ``CLGATE_API_KEY``.

Exit codes match ``clgate gate``: 0 PASS (and WARN unless ``--fail-on-warn``; a FAIL with a waiver in
force too), 1 FAIL, 2 invalid input or a request the service refused (4xx), 3 the service unreachable,
failing (5xx), a job that failed or was cancelled, or a wait that timed out.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from clgate.client import Client
    from clgate.schemas.api import JobPublic

remote_app = typer.Typer(
    help="Use a running clgate service: submit jobs, wait for verdicts, fetch results "
    "(CLGATE_URL, CLGATE_API_KEY).",
    no_args_is_help=True,
)
policies_app = typer.Typer(help="Policy versions of the key's project.", no_args_is_help=True)
baselines_app = typer.Typer(help="Baselines (one succeeded job per model name).", no_args_is_help=True)

Url = Annotated[str | None, typer.Option("--url", envvar="CLGATE_URL", help="The service's base URL.")]
Key = Annotated[
    str | None, typer.Option("--api-key", envvar="CLGATE_API_KEY", help="API key (prefer the variable).")
]
FailOnWarn = Annotated[bool, typer.Option("--fail-on-warn", help="Exit 1 on WARN too.")]
Timeout = Annotated[float, typer.Option("--timeout", min=1, help="Seconds to wait for the job.")]
Out = Annotated[Path | None, typer.Option("--out", help="Download the job's result files here.")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")]


def _fail(message: str, code: int) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


@contextlib.contextmanager
def _client(url: str | None, key: str | None) -> Iterator[Client]:
    """The client, with every client error turned into a message and an exit code (2 input, 3 service)."""
    # lazy: httpx — the optional clgate[client] extra; CLI: `clgate --help` loads no command's dependencies
    from clgate.client import ApiError, Client, ClientError, Unreachable, WaitTimeout
    from clgate.schemas.errors import InputError

    try:
        with Client(url, key) as client:
            yield client
    except ApiError as exc:
        extra = "".join(f"\n  {p}" for p in exc.problems if p != exc.reason)
        code = 2 if exc.status < 500 else 3
        raise _fail(f"the service answered {exc.status}: {exc.reason}{extra}", code) from None
    except (Unreachable, WaitTimeout) as exc:
        raise _fail(str(exc), 3) from None
    except (ClientError, InputError) as exc:
        raise _fail(str(exc), 2) from None


def _describe(job: JobPublic) -> str:
    p = job.progress
    task = f" task {p.task}/{p.n_tasks}" if p.task is not None and p.n_tasks else ""
    task = task or (f" task {p.task}" if p.task is not None else "")
    return f"{p.stage or job.state}{task}"


def _wait(client: Client, job_id: str, timeout: float, quiet: bool) -> JobPublic:
    """Wait for the job with a progress bar on stderr (from the moment it is queued)."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

    if quiet:
        return client.wait(job_id, timeout=timeout)
    columns = (TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True)) as bar:
        task = bar.add_task(f"job {job_id[:8]}", total=1.0)

        def show(job: JobPublic) -> None:
            fraction = job.progress.fraction or 0.0
            bar.update(task, completed=fraction, description=f"job {job_id[:8]} {_describe(job)}")

        return client.wait(job_id, timeout=timeout, on_progress=show)


def _verdict_exit(client: Client, job: JobPublic, fail_on_warn: bool, out: Path | None) -> int:
    """Print the outcome, download results when asked, and return the exit code of ``clgate gate``."""
    # lazy: CLI — `clgate --help` loads no command's dependencies
    from clgate.schemas.vocab import exit_code

    if out is not None and job.state != "cancelled":
        for path in client.download_all(job.id, out):
            typer.echo(f"wrote {path}", err=True)
    if job.state != "succeeded":
        typer.echo(f"job {job.id} {job.state}: {job.error or 'no reason recorded'}", err=True)
        return 3
    decision = client.decision(job.id)
    waived = " (waived)" if job.waived else ""
    typer.echo(
        f"{decision.verdict}{waived}: job {job.id} model {job.model_name} policy "
        f"{job.policy.name}@{job.policy.version}"
    )
    if decision.verdict == "FAIL" and job.waived:
        return 0
    return exit_code(decision.verdict, fail_on_warn=fail_on_warn)


def _policy_ref(client: Client, policy: str) -> str:
    """``NAME@VERSION`` as given, or the policy file published first (its name@version)."""
    if "@" in policy and not Path(policy).exists():
        return policy
    created = client.create_policy(Path(policy))
    typer.echo(f"policy {created.name}@{created.version} ({created.sha256[:12]})", err=True)
    return f"{created.name}@{created.version}"


def submit(
    spec: Annotated[Path | None, typer.Argument(help="Job spec (YAML/JSON); its files are uploaded.")] = None,
    model_name: Annotated[str, typer.Option("--model-name", help="The model's name (baselines key).")] = "",
    policy: Annotated[
        str, typer.Option("--policy", help="NAME@VERSION of a published policy, or a policy file to publish.")
    ] = "",
    log: Annotated[list[Path] | None, typer.Option("--log", help="Evaluation log (metrics mode).")] = None,
    baseline: Annotated[str, typer.Option(help="'model', 'none' or a job id.")] = "model",
    candidate_version: Annotated[
        str | None,
        typer.Option(
            "--candidate-version",
            help="The candidate's version (the candidate is --model-name); the commit and CI run are read "
            "from the CI's variables, as clgate gate reads them.",
        ),
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait for the verdict; exit like clgate gate.")
    ] = False,
    timeout: Timeout = 3600.0,
    fail_on_warn: FailOnWarn = False,
    out: Out = None,
    idempotency_key: Annotated[str | None, typer.Option(help="Retries with it create one job.")] = None,
    quiet: Quiet = False,
    url: Url = None,
    api_key: Key = None,
) -> None:
    """Submit a job: a spec (retrain/evaluate) or --log files (metrics); with --wait, gate on its verdict."""
    if (spec is None) == (not log):
        raise _fail("give a job spec or --log files (not both)", 2)
    if not model_name or not policy:
        raise _fail("--model-name and --policy are required", 2)
    options: dict[str, Any] = {
        "baseline": baseline,
        "candidate_version": candidate_version,
        "idempotency_key": idempotency_key,
    }
    with _client(url, api_key) as client:
        ref = _policy_ref(client, policy)
        if spec is not None:
            job = client.submit_spec(spec, model_name=model_name, policy=ref, **options)
        else:
            logs: list[str | Path] = list(log or [])
            job = client.submit_logs(logs, model_name=model_name, policy=ref, **options)
        typer.echo(job.id)
        if wait:
            job = _wait(client, job.id, timeout, quiet)
            raise typer.Exit(_verdict_exit(client, job, fail_on_warn, out))


def wait_cmd(
    job_id: Annotated[str, typer.Argument(help="The job's id.")],
    timeout: Timeout = 3600.0,
    fail_on_warn: FailOnWarn = False,
    out: Out = None,
    quiet: Quiet = False,
    url: Url = None,
    api_key: Key = None,
) -> None:
    """Wait for a job with a progress bar; exit with its verdict like clgate gate."""
    with _client(url, api_key) as client:
        job = _wait(client, job_id, timeout, quiet)
        raise typer.Exit(_verdict_exit(client, job, fail_on_warn, out))


def results(
    job_id: Annotated[str, typer.Argument(help="The job's id.")],
    out: Out = None,
    url: Url = None,
    api_key: Key = None,
) -> None:
    """List a job's result files, or download them all with --out."""
    with _client(url, api_key) as client:
        if out is not None:
            for path in client.download_all(job_id, out):
                typer.echo(str(path))
            return
        for f in client.results(job_id).files:
            typer.echo(f"{f.name}\t{f.size}\tsha256:{f.sha256}")


def jobs(
    state: Annotated[str | None, typer.Option(help="queued, running, succeeded, failed, cancelled.")] = None,
    model_name: Annotated[str | None, typer.Option("--model-name")] = None,
    verdict: Annotated[str | None, typer.Option(help="PASS, WARN, FAIL, ERROR.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=500)] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print the API's JSON.")] = False,
    url: Url = None,
    api_key: Key = None,
) -> None:
    """List jobs, newest first."""
    with _client(url, api_key) as client:
        page = client.jobs(state=state, model_name=model_name, verdict=verdict, limit=limit)
        if as_json:
            typer.echo(page.model_dump_json(indent=2))
            return
        for j in page.data:
            verdict_text = (j.verdict or "-") + (" (waived)" if j.waived else "")
            typer.echo(
                f"{j.id}  {j.state:<9}  {verdict_text:<14}  {j.mode:<8}  {j.model_name}  {_describe(j)}"
            )
        typer.echo(f"{len(page.data)} of {page.count} jobs", err=True)


def cancel(job_id: str, url: Url = None, api_key: Key = None) -> None:
    """Cancel a job (queued: at once; running: at its next iteration)."""
    with _client(url, api_key) as client:
        typer.echo(f"job {job_id}: {client.cancel(job_id).state} (cancel requested)")


def waive(
    job_id: str,
    justification: Annotated[str, typer.Option("--justification", help="Why shipping is acceptable.")],
    expires_at: Annotated[str | None, typer.Option(help="RFC 3339 time the waiver ends.")] = None,
    url: Url = None,
    api_key: Key = None,
) -> None:
    """Record a justified waiver of a FAIL (an approver key that did not submit the job)."""
    with _client(url, api_key) as client:
        w = client.waive(job_id, justification, expires_at=expires_at)
        typer.echo(f"waiver {w.id} of job {job_id} by {w.approver}")


def policies_list(name: str | None = None, url: Url = None, api_key: Key = None) -> None:
    """List policy versions."""
    with _client(url, api_key) as client:
        for p in client.policies(name).data:
            typer.echo(f"{p.name}@{p.version}\tsha256:{p.sha256}\t{p.created_at:%Y-%m-%d %H:%M}")


def policies_push(
    file: Annotated[Path, typer.Argument(help="Policy file, YAML or JSON (sent as written).")],
    url: Url = None,
    api_key: Key = None,
) -> None:
    """Publish a policy version (identical content again is a no-op; other content is refused)."""
    with _client(url, api_key) as client:
        p = client.create_policy(file)
        typer.echo(f"{p.name}@{p.version}\tsha256:{p.sha256}")


def baselines_list(url: Url = None, api_key: Key = None) -> None:
    """List baselines."""
    with _client(url, api_key) as client:
        for b in client.baselines().data:
            typer.echo(f"{b.model_name}\t{b.job_id}\t{b.set_by}")


def baselines_set(model_name: str, job_id: str, url: Url = None, api_key: Key = None) -> None:
    """Make a succeeded job the model name's baseline (approver)."""
    with _client(url, api_key) as client:
        b = client.set_baseline(model_name, job_id)
        typer.echo(json.dumps({"model_name": b.model_name, "job_id": b.job_id}))


def register(app: typer.Typer) -> None:
    """Add ``clgate remote`` to the root app."""
    remote_app.command("submit")(submit)
    remote_app.command("wait")(wait_cmd)
    remote_app.command("results")(results)
    remote_app.command("jobs")(jobs)
    remote_app.command("cancel")(cancel)
    remote_app.command("waive")(waive)
    policies_app.command("list")(policies_list)
    policies_app.command("push")(policies_push)
    baselines_app.command("list")(baselines_list)
    baselines_app.command("set")(baselines_set)
    remote_app.add_typer(policies_app, name="policies")
    remote_app.add_typer(baselines_app, name="baselines")
    app.add_typer(remote_app, name="remote")
