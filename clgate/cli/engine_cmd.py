"""``clgate run`` (continual retraining with continual evaluation) and ``clgate evaluate`` (checkpoints).

torch is imported inside the commands, so ``clgate --help`` stays fast.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

if TYPE_CHECKING:
    from clgate.engine import Progress
    from clgate.schemas.job import JobSpec

SPEC_SUFFIXES = (".yaml", ".yml", ".json")


def fail(message: str, code: int = 2) -> NoReturn:
    """Print an error for a person (no traceback) and exit with ``code``."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _load_spec(spec_path: Path | None, overrides: list[str]) -> JobSpec:
    """The spec file with overrides applied, or (no file) a spec from the overrides alone."""
    # lazy: CLI — `clgate --help` loads no command's dependencies
    from clgate.documents import load_job, parse_overrides
    from clgate.schemas.job import JobSpec, JobSpecError

    try:
        if spec_path is None:
            return JobSpec.from_overrides(parse_overrides(overrides))
        spec = load_job(spec_path)
        return spec.with_overrides(parse_overrides(overrides)) if overrides else spec
    except JobSpecError as exc:
        fail(str(exc))
    raise AssertionError("unreachable")


def job_launcher(spec: JobSpec) -> Any:
    """How the model's child starts, per ``CLGATE_SANDBOX`` (the service's setting): ``bwrap`` confines it
    in bubblewrap with the service's limits (an error when bubblewrap cannot run here), ``auto``
    confines it when bubblewrap works, unset or ``none`` runs it as a plain subprocess. In every case
    the child gets held-out inputs without labels and this process counts (docs/engine.md)."""
    import os

    # lazy: torch — CLI: `clgate --help` loads no command's dependencies
    from clgate.engine.runner import local_launcher

    choice = os.environ.get("CLGATE_SANDBOX", "").strip().lower()
    if choice in ("", "none"):
        return local_launcher
    if choice not in ("auto", "bwrap"):
        fail(f"CLGATE_SANDBOX: {choice!r} is not one of auto, bwrap, none")
    try:
        # lazy: SQLAlchemy/Celery — the service extra is optional for `clgate run`
        from clgate.store.settings import load_settings
        from clgate.workers import sandbox
    except ImportError:
        fail(f"CLGATE_SANDBOX={choice} needs the service extra: pip install 'clgate[service]'")
    settings = load_settings()
    status = sandbox.sandbox_status(settings.model_copy(update={"sandbox": choice}))
    if status.mode == "bwrap":
        gpu = spec.device != "cpu" and Path("/dev/nvidiactl").exists()
        return sandbox.SandboxLauncher(settings, "bwrap", None, gpu=gpu)
    if choice == "bwrap":
        fail(f"cannot confine the model: {status.detail}")
    return local_launcher


def run_engine_job(
    spec: JobSpec, out: Path, *, base_dir: Path | None, progress: Any = None, launcher: Any = None
) -> list[Path]:
    """``clgate.engine.run_job`` with the launcher :func:`job_launcher` picks (``run``, ``evaluate``,
    ``gate --job`` and ``demo`` share it)."""
    # lazy: torch — CLI: `clgate --help` loads no command's dependencies
    from clgate.engine import run_job

    launcher = launcher or job_launcher(spec)
    gpu = bool(getattr(launcher, "gpu", False))
    # the child's inputs are staged inside the output folder (not in /tmp, often memory) and removed after
    out.mkdir(parents=True, exist_ok=True)
    settings = getattr(launcher, "settings", None)  # a confined child: the service's size bound applies
    bound = settings.sandbox_max_file_bytes if settings is not None else None
    return run_job(
        spec,
        out,
        progress=progress,
        base_dir=base_dir,
        launcher=launcher,
        gpu=gpu,
        work_dir=out,
        max_file_bytes=bound,
    )


def _common_overrides(seeds: str | None, device: str | None) -> list[str]:
    out = []
    if seeds is not None:
        out.append(f"seeds=[{seeds}]")
    if device is not None:
        out.append(f"device={device}")
    return out


class _Display:
    """Progress for a person: a rich bar on a terminal, plain periodic lines otherwise."""

    def __init__(self, enabled: bool, interval_s: float = 5.0) -> None:
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self.interval_s = interval_s
        self.bar: Any = None
        self.task_id: Any = None
        self.last_line = 0.0
        self.last_key: tuple[int, int] | None = None
        self.last_printed: tuple[int, int] | None = None

    def __enter__(self) -> _Display:
        if self.enabled and self.tty:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
            )

            self.bar = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("iterations"),
                TimeRemainingColumn(),
                TextColumn("{task.fields[last_eval]}"),
                transient=False,
            )
            self.bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def __call__(self, p: Progress) -> None:
        if not self.enabled:
            return
        last = "last eval —" if p.last_eval is None else f"last eval {p.last_eval:.3f}"
        desc = f"seed {p.seed} ({p.seed_index + 1}/{p.n_seeds}) task {p.task}/{p.n_tasks}"
        if self.bar is not None:
            if self.task_id is None or self.last_key is None or self.last_key[0] != p.seed_index:
                self.task_id = self.bar.add_task(desc, total=max(1, p.total_iterations), last_eval=last)
            self.bar.update(
                self.task_id,
                completed=p.iteration,
                total=max(1, p.total_iterations),
                description=desc,
                last_eval=last,
            )
            self.last_key = (p.seed_index, p.task)
            return
        now = time.monotonic()
        key = (p.seed_index, p.task)
        if (p.seed_index, p.iteration) == self.last_printed:
            return
        if (
            key != self.last_key
            or now - self.last_line >= self.interval_s
            or p.iteration >= p.total_iterations
        ):
            self.last_printed = (p.seed_index, p.iteration)
            eta = ""
            if p.total_iterations // 20 < p.iteration < p.total_iterations:
                eta = f", ETA {p.elapsed_s / p.iteration * (p.total_iterations - p.iteration):.0f}s"
            typer.echo(f"{desc}: iteration {p.iteration}/{p.total_iterations}{eta}, {last}", err=True)
            self.last_line = now
            self.last_key = key


NoLimits = Annotated[
    bool,
    typer.Option(
        "--no-limits",
        help="Lift the data limits (CLGATE_MAX_NPZ_BYTES, CLGATE_MAX_SAMPLES) for your own large data.",
    ),
]
MaxSamples = Annotated[
    int | None,
    typer.Option("--max-samples", min=1, help="Most samples per data array (default: CLGATE_MAX_SAMPLES)."),
]
MaxDataBytes = Annotated[
    int | None,
    typer.Option(
        "--max-data-bytes", min=1, help="Largest decompressed data set (default: CLGATE_MAX_NPZ_BYTES)."
    ),
]


def _limits(no_limits: bool, max_samples: int | None, max_data_bytes: int | None):
    """The data limits of this run: the service's ``CLGATE_MAX_*`` settings, a flag's value, or none."""
    from dataclasses import replace

    # lazy: torch — CLI: `clgate --help` loads no command's dependencies
    from clgate.engine.data import DataLimits
    from clgate.engine.errors import DataError

    if no_limits:
        return None
    try:
        limits = DataLimits.from_env()
    except DataError as exc:
        fail(str(exc))
    if max_samples is not None:
        limits = replace(limits, max_samples=max_samples)
    if max_data_bytes is not None:
        limits = replace(limits, max_bytes=max_data_bytes)
    return limits


def _execute(spec: JobSpec, out: Path, base_dir: Path | None, quiet: bool, limits: Any) -> None:
    # lazy: torch — CLI: `clgate --help` loads no command's dependencies
    from clgate.documents import load_log
    from clgate.engine import EngineInputError
    from clgate.engine.data import data_limits

    launcher = job_launcher(spec)  # a bad CLGATE_SANDBOX exits 2 here
    try:
        with _Display(enabled=not quiet) as display, data_limits(limits):
            paths = run_engine_job(spec, out, progress=display, base_dir=base_dir, launcher=launcher)
    except KeyboardInterrupt as exc:
        written = getattr(exc, "paths", [])
        where = f"; partial log written to {written[-1]}" if written else ""
        typer.echo(f"interrupted{where}", err=True)
        raise typer.Exit(130) from None
    except EngineInputError as exc:
        fail(str(exc))
    except OSError as exc:  # an unreadable input or an unwritable --out folder
        fail(f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "))
    except Exception as exc:  # a bug, not the input: exit 3 with the message
        fail(f"internal error: {type(exc).__name__}: {exc}", code=3)
    for path in paths:
        log = load_log(path)
        end = [p for p in log.points if p.task_end][-1]
        total = sum(end.total or [])
        acc = sum(end.correct or []) / total if total else float("nan")
        typer.echo(f"{path}: {len(log.points)} evaluation points, final accuracy {acc:.4f}")


def run_command(
    spec: Annotated[Path, typer.Argument(help="Job specification (YAML or JSON).", show_default=False)],
    overrides: Annotated[
        list[str] | None,
        typer.Argument(help="Field overrides key=value, e.g. strategy.name=er training.epochs=2."),
    ] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="A field override key=value (repeatable).")
    ] = None,
    seeds: Annotated[
        str | None, typer.Option(help="Comma-separated seeds, one log each (e.g. 0,1,2).")
    ] = None,
    device: Annotated[str | None, typer.Option(help="auto (CUDA when present), cpu, cuda, cuda:N.")] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the logs (log-seed{S}.json).")] = Path(
        "clgate-out"
    ),
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress output.")] = False,
    no_limits: NoLimits = False,
    max_samples: MaxSamples = None,
    max_data_bytes: MaxDataBytes = None,
) -> None:
    """Retrain a candidate class-incrementally with a strategy, evaluating it continually."""
    all_overrides = list(overrides or []) + list(set_ or []) + _common_overrides(seeds, device)
    job = _load_spec(spec, all_overrides)
    if job.mode != "retrain":
        fail(f"{spec}: mode is {job.mode!r}; use `clgate evaluate` for checkpoints")
    _execute(job, out, spec.resolve().parent, quiet, _limits(no_limits, max_samples, max_data_bytes))


def evaluate_command(
    args: Annotated[
        list[str] | None,
        typer.Argument(
            help="More checkpoints, the job spec (.yaml/.yml/.json) and key=value overrides.",
            show_default=False,
        ),
    ] = None,
    checkpoints: Annotated[
        list[str] | None,
        typer.Option("--checkpoints", "-c", help="Checkpoint PATH, PATH@ITERATION or PATH@ITERATION:TASK."),
    ] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="A field override key=value (repeatable).")
    ] = None,
    seeds: Annotated[
        str | None, typer.Option(help="Comma-separated seeds (they pick the eval subsample).")
    ] = None,
    device: Annotated[str | None, typer.Option(help="auto (CUDA when present), cpu, cuda, cuda:N.")] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the logs.")] = Path("clgate-out"),
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress output.")] = False,
    no_limits: NoLimits = False,
    max_samples: MaxSamples = None,
    max_data_bytes: MaxDataBytes = None,
) -> None:
    """Evaluate a sequence of checkpoints (one per task end, or more with iterations) on held-out data.

    Example: clgate evaluate --checkpoints t1.safetensors t2.safetensors t3.safetensors job.yaml --out out/
    """
    spec_path: Path | None = None
    overrides: list[str] = []
    cks = list(checkpoints or [])
    for arg in args or []:
        if arg.lower().endswith(SPEC_SUFFIXES):
            if spec_path is not None:
                fail(f"two job specs given: {spec_path} and {arg}")
            spec_path = Path(arg)
        elif "=" in arg and not Path(arg).exists():
            overrides.append(arg)
        else:
            cks.append(arg)
    if not cks:
        fail("give the checkpoints: --checkpoints CK1 CK2 … (one per task end, or PATH@ITERATION:TASK)")
    overrides += list(set_ or []) + _common_overrides(seeds, device)
    # Checkpoints given on the command line are relative to the current folder.
    overrides.append("mode=evaluate")
    overrides.append("checkpoints=" + json.dumps([_absolute_checkpoint(c) for c in cks]))
    job = _load_spec(spec_path, overrides)
    base_dir = spec_path.resolve().parent if spec_path else Path.cwd()
    _execute(job, out, base_dir, quiet, _limits(no_limits, max_samples, max_data_bytes))


def _absolute_checkpoint(text: str) -> str:
    # lazy: CLI — `clgate --help` loads no command's dependencies
    from clgate.schemas.job import parse_checkpoint

    parsed = parse_checkpoint(text)
    return str(Path(parsed["path"]).resolve()) + text[len(parsed["path"]) :]


def register(app: typer.Typer) -> None:
    """Add ``run`` and ``evaluate`` to the root app."""
    app.command("run")(run_command)
    app.command("evaluate")(evaluate_command)
