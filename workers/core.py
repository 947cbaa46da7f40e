"""The only place the service layer calls into the other areas of clgate (engine, policy, gate).

Thin adapters, no maths: the job runner and the API import these so that a change of a library
signature is one edit here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from clgate import documents
from clgate.schemas.errors import InputError, problems_of
from clgate.schemas.evaluation_log import EvaluationLog, EvaluationLogError
from clgate.schemas.job import ImageFolderData, JobSpec, NpzData


def parse_policy(document: dict[str, Any]):
    """A validated :class:`clgate.policy.Policy`; raises :class:`~clgate.schemas.errors.InputError`."""
    # lazy: the sandboxed child imports this module to run the engine: it loads no policy, metrics or
    # report code (about half a second at its start)
    from clgate.policy import parse_policy as _parse

    return _parse(document)


def parse_job_spec(document: dict[str, Any]):
    """A validated :class:`clgate.schemas.job.JobSpec`; raises :class:`~clgate.schemas.errors.InputError`."""
    return JobSpec.parse(document)


def load_log(path: Path):
    """A validated evaluation log, JSON or JSON Lines; raises :class:`~clgate.schemas.errors.InputError`.

    Stored artifacts have no suffix, so the format is read from the content: JSON Lines when the first
    line is a whole JSON object and more lines follow.
    """
    from pydantic import ValidationError

    if path.suffix != ".jsonl" and _is_json_lines(path):
        try:
            return EvaluationLog.from_jsonl(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            problems = problems_of(exc) if isinstance(exc, ValidationError) else [str(exc)]
            raise EvaluationLogError(problems, str(path)) from None
    return documents.load_log(path)


def _is_json_lines(path: Path) -> bool:
    import json

    try:
        with open(path, "rb") as f:
            first = f.readline(1 << 20)
            rest = f.read(1 << 16).strip()
        return bool(rest) and isinstance(json.loads(first), dict)
    except (OSError, ValueError):
        return False


def check_data_limits(spec: JobSpec, base_dir: Path, *, max_bytes: int, max_samples: int) -> None:
    """Refuse an NPZ or image-folder data set over the size or sample limits, before loading it."""
    # lazy: torch — clgate.engine needs the engine extra; this module imports without it
    from clgate.engine.data import check_image_folder_limits, check_npz_limits

    data = spec.data
    if not isinstance(data, NpzData | ImageFolderData) or not data.path:
        return
    path = Path(data.path) if Path(data.path).is_absolute() else base_dir / data.path
    if isinstance(data, NpzData):
        problems = check_npz_limits(path, max_bytes=max_bytes, max_samples=max_samples)
    else:
        problems = check_image_folder_limits(
            path, size=data.size, color=data.color, max_bytes=max_bytes, max_samples=max_samples
        )
    if problems:
        raise InputError([f"data: {p}" for p in problems])


def run_engine(
    spec,
    out_dir: Path,
    *,
    progress: Callable[[Any], None],
    should_stop: Callable[[], bool],
    base_dir: Path,
    **options: Any,
) -> tuple[list[Path], bool]:
    """``clgate.engine.run_job`` (``options``: its launcher, threads, gpu, work_dir, stop_grace_s): (one
    evaluation log per seed, whether it was stopped — the last log partial)."""
    # lazy: torch — clgate.engine needs the engine extra; this module imports without it
    from clgate.engine import JobCancelled, run_job

    try:
        paths = run_job(
            spec, out_dir, progress=progress, should_stop=should_stop, base_dir=base_dir, **options
        )
        return list(paths), False
    except JobCancelled as stop:
        return list(stop.paths), True


def gate(logs: Sequence[Any], policy, *, baseline, out_dir: Path, provenance: dict[str, Any]):
    """``clgate.gate.gate_logs`` → the decision (writes report.html, report.md, decision.json …)."""
    # lazy: the sandboxed child imports this module and never gates (see parse_policy)
    from clgate.gate import gate_logs

    result = gate_logs(logs, policy, baseline=baseline, out_dir=out_dir, provenance=provenance)
    return getattr(result, "decision", result)


def progress_dict(progress: Any) -> dict[str, Any]:
    """The engine's progress object → the job record's ``progress`` (fraction, task, iteration, message)."""
    if hasattr(progress, "model_dump"):
        raw = progress.model_dump(mode="json")
    elif isinstance(progress, dict):
        raw = dict(progress)
    else:
        raw = (
            {k: v for k, v in vars(progress).items() if not k.startswith("_")}
            if hasattr(progress, "__dict__")
            else {}
        )
    out: dict[str, Any] = {}
    fraction = raw.get("fraction")
    if fraction is None and raw.get("total_iterations"):
        fraction = (raw.get("iteration") or 0) / raw["total_iterations"]
        if raw.get("n_seeds"):
            fraction = ((raw.get("seed_index") or 0) + min(1.0, fraction)) / raw["n_seeds"]
    if fraction is not None:
        out["fraction"] = max(0.0, min(1.0, float(fraction)))
    for key in ("task", "n_tasks", "iteration"):
        if isinstance(raw.get(key), int):
            out[key] = raw[key]
    message = raw.get("message")
    if message is None:
        parts = [
            f"{k}={raw[k]}" for k in ("seed", "task", "iteration", "last_eval") if raw.get(k) is not None
        ]
        message = " ".join(parts) or None
    if message is not None:
        out["message"] = str(message)[:500]
    return out
