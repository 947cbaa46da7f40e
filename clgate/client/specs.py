"""A local job spec made ready for the service: the files it names are uploaded and replaced by
``{"artifact": "sha256:…"}`` references (the service never reads a client's paths)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from clgate.documents import parse_document, read_text
from clgate.schemas.errors import InputError
from clgate.schemas.job import JobSpecError, parse_checkpoint

# (where in the spec, artifact kind): the fields of clgate.schemas.job.JobSpec that name files
FILE_FIELDS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("data", "path"), "data"),
    (("model", "weights"), "model"),
    (("model", "torchscript"), "model"),
)


def load_document(path: Path, error: type[InputError] = JobSpecError) -> dict[str, Any]:
    """A YAML or JSON file as a mapping (``error`` names the file and the reason otherwise)."""
    return parse_document(read_text(path, error), error, source=str(path), fields="(a clgate document)")


def prepare_spec(spec: dict[str, Any], base_dir: Path, upload: Callable[[Path, str], str]) -> dict[str, Any]:
    """``spec`` with every local file it names (data path, model weights or TorchScript, checkpoints)
    replaced by the artifact reference ``upload(path, kind)`` returns; relative paths are relative to
    ``base_dir``. A value that is already ``{"artifact": …}`` is kept; a missing file raises
    :class:`JobSpecError` naming the field.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / "d.npz").write_bytes(b"x")
    >>> prepare_spec({"data": {"kind": "npz", "path": "d.npz"}}, folder, lambda p, k: f"sha256:{k}")
    {'data': {'kind': 'npz', 'path': {'artifact': 'sha256:data'}}}
    """
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in spec.items()}
    targets: list[tuple[dict[str, Any], str, str, str]] = []
    for (section, key), kind in FILE_FIELDS:
        if isinstance(out.get(section), dict):
            targets.append((out[section], key, kind, f"{section}.{key}"))
    if isinstance(out.get("checkpoints"), list):
        out["checkpoints"] = [
            dict(c) if isinstance(c, dict) else parse_checkpoint(str(c)) for c in out["checkpoints"]
        ]
        targets += [(c, "path", "model", f"checkpoints[{i}].path") for i, c in enumerate(out["checkpoints"])]
    for holder, key, kind, field in targets:
        value = holder.get(key)
        if not isinstance(value, str):
            continue
        path = Path(value) if Path(value).is_absolute() else base_dir / value
        if not path.is_file():
            raise JobSpecError([f"{field}: no file {path}"])
        holder[key] = {"artifact": upload(path, kind)}
    return out
