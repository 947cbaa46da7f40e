"""What a job's inputs can be judged on at submission, before the job is queued (422 naming the field):
the data set's size and sample count from its headers (NPZ) or its listing (an image-folder archive),
and each model file's format (:func:`clgate.engine.modelfile.check_model_file`, which opens no model).

These checks need the ``engine`` extra (torch) in the API process. Where it is not installed they are
left to the worker, which makes the same checks before running anything (the job then fails with the
same message); ``/readyz`` is unaffected.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from clgate.store.settings import Settings


def engine_available() -> bool:
    """Whether this process can run the engine's checks (the ``engine`` extra is installed)."""
    return importlib.util.find_spec("torch") is not None


def _model_files(job: Any) -> list[tuple[str, str]]:
    """``(field, path)`` of every model file the job names."""
    out = []
    model = getattr(job, "model", None)
    for attr in ("weights", "torchscript"):
        path = getattr(model, attr, None)
        if path:
            out.append((f"spec.model.{attr}", path))
    for i, ck in enumerate(getattr(job, "checkpoints", None) or []):
        out.append((f"spec.checkpoints[{i}].path", ck.path))
    return out


def _data_problems(job: Any, settings: Settings) -> list[str]:
    # lazy: torch — the engine extra is optional in the API process (judged only where it is installed)
    from clgate.engine.archive import ArchiveError, ArchiveLimits, check_archive
    from clgate.engine.data import DataLimits

    data = getattr(job, "data", None)
    kind, path = getattr(data, "kind", None), getattr(data, "path", None)
    if kind not in ("npz", "image_folder") or not path:
        return []
    limits = DataLimits(max_bytes=settings.max_npz_bytes, max_samples=settings.max_samples)
    if kind == "image_folder" and Path(path).is_file():  # an uploaded archive: judged by its listing
        try:  # with the bounds the worker extracts it under (clgate.workers.runner._unpack_image_folder)
            check_archive(
                path,
                limits=ArchiveLimits.following(max_bytes=limits.max_bytes, max_samples=limits.max_samples),
            )
        except ArchiveError as exc:
            return [f"spec.data.path: {exc}"]
        return []
    assert data is not None  # a data kind was found on it
    return [f"spec.data.path: {p}" for p in limits.problems(data.model_dump(), None)]


def judge_inputs(job: Any, settings: Settings) -> list[str]:
    """Why the parsed job spec ``job`` (paths resolved to stored files) cannot run, as ``field: reason``
    lines; ``[]`` when nothing is wrong or the engine is not installed here (see the module's text)."""
    if not engine_available():
        return []
    # lazy: torch — the engine extra is optional in the API process (judged only where it is installed)
    from clgate.engine.errors import EngineInputError
    from clgate.engine.modelfile import check_model_file

    problems = _data_problems(job, settings)
    for field, path in _model_files(job):
        try:
            check_model_file(path)
        except EngineInputError as exc:
            problems.append(f"{field}: {str(exc).replace(str(path), 'the file')}")
    return problems
