"""Documents as files and as text: job specifications (YAML or JSON) and evaluation logs (JSON, JSON Lines).

The contracts (:mod:`clgate.schemas`) say what a valid document is; this module reads and writes them:
text → mapping (YAML, or JSON, which is YAML), files → validated models, models → files. Every failure
is the contract's error class (:class:`~clgate.schemas.job.JobSpecError`,
:class:`~clgate.schemas.evaluation_log.EvaluationLogError` …) naming the file, the field and the reason.

>>> spec = parse_job("data: digits\\nscenario: {n_tasks: 5}\\n")
>>> spec.with_overrides(parse_overrides(["strategy.name=er", "training.epochs=2"])).training.epochs
2
>>> parse_overrides(["seeds=[1, 2]", "device=cpu", "note="])
{'seeds': [1, 2], 'device': 'cpu', 'note': ''}
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import ValidationError

from clgate.schemas.errors import InputError, problems_of
from clgate.schemas.evaluation_log import EvaluationLog, EvaluationLogError
from clgate.schemas.job import JobSpec, JobSpecError

__all__ = [
    "dump_job",
    "dump_log",
    "load_job",
    "load_log",
    "parse_document",
    "parse_job",
    "parse_overrides",
    "read_text",
]

YAML_SUFFIXES = (".yaml", ".yml")


def read_text(path: Path, error: type[InputError]) -> str:
    """The UTF-8 text of ``path``; an unreadable file raises ``error`` naming it."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise error([f"cannot read file: {getattr(exc, 'strerror', None) or exc}"], str(path)) from None


def parse_document(
    data: str | bytes | Mapping[str, Any],
    error: type[InputError],
    *,
    source: str | None = None,
    syntax: Literal["YAML", "JSON", "YAML/JSON"] = "YAML/JSON",
    fields: str,
) -> dict[str, Any]:
    """A document given as text (YAML, or JSON, which is YAML) or as a mapping, as a dict.

    Text that does not parse, or a document that is not a mapping, raises ``error`` with one line that
    says so (``fields`` names the expected fields, e.g. ``"name, rules, …"``).
    """
    if isinstance(data, (str, bytes)):
        try:
            data = json.loads(data) if syntax == "JSON" else yaml.safe_load(data)
        except Exception as exc:  # yaml.YAMLError, json.JSONDecodeError, …: a problem to report, not a crash
            raise error([f"not valid {syntax}: {exc}"], source) from None
    if not isinstance(data, Mapping):
        raise error([f"the document must be a mapping {fields}"], source)
    return dict(data)


# ---------------------------------------------------------------------------------------- evaluation logs
def load_log(path: str | Path) -> EvaluationLog:
    """Read and validate a log (``.json``, or ``.jsonl`` with a header line then one point a line).

    Raises :class:`EvaluationLogError` naming the file, the field and the reason.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise EvaluationLogError([f"cannot read file: {exc.strerror or exc}"], str(path)) from exc
    try:
        if path.suffix == ".jsonl":
            return EvaluationLog.from_jsonl(raw.decode("utf-8"))
        return EvaluationLog.model_validate_json(raw)
    except ValidationError as exc:
        raise EvaluationLogError(problems_of(exc), str(path)) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise EvaluationLogError([str(exc)], str(path)) from None


def dump_log(log: EvaluationLog, path: str | Path) -> None:
    """Write ``log`` as JSON (or JSON Lines for ``.jsonl``), atomically (write then rename)."""
    path = Path(path)
    text = log.to_jsonl() if path.suffix == ".jsonl" else log.model_dump_json(exclude_none=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


# ------------------------------------------------------------------------------------- job specifications
def load_job(path: str | Path) -> JobSpec:
    """Read a YAML (``.yaml``/``.yml``) or JSON job file; raises :class:`JobSpecError`."""
    path = Path(path)
    text = read_text(path, JobSpecError)
    return parse_job(text, source=str(path), yaml=path.suffix.lower() in YAML_SUFFIXES)


def parse_job(
    text: str | bytes | Mapping[str, Any], *, source: str | None = None, yaml: bool = True
) -> JobSpec:
    """Validate a job given as YAML/JSON text (JSON is YAML) or a mapping; raises :class:`JobSpecError`.

    ``yaml=False`` reads the text as JSON only (a ``.json`` file)."""
    data = parse_document(
        text,
        JobSpecError,
        source=source,
        syntax="YAML" if yaml else "JSON",
        fields="of fields (data, scenario, model …)",
    )
    return JobSpec.parse(data, source=source)


def dump_job(spec: JobSpec, path: str | Path) -> None:
    """Write ``spec`` as YAML (``.yaml``/``.yml``) or JSON."""
    path = Path(path)
    data = spec.model_dump(mode="json")
    if path.suffix.lower() in YAML_SUFFIXES:
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    else:
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def parse_overrides(overrides: Sequence[str]) -> dict[str, Any]:
    """``["training.epochs=2", "seeds=[1,2]"]`` → ``{"training.epochs": 2, "seeds": [1, 2]}``.

    Values are read as YAML scalars or lists (``2`` → int, ``[0,1]`` → list, ``null`` → None); text
    that is not YAML stays text. For :meth:`JobSpec.with_overrides` and :meth:`JobSpec.from_overrides`.
    An entry that is not ``key=value`` raises :class:`JobSpecError`.
    """
    items: dict[str, Any] = {}
    problems: list[str] = []
    for text in overrides:
        key, sep, raw = text.partition("=")
        if not sep or not key.strip():
            problems.append(f"override {text!r}: expected key=value (e.g. training.epochs=2)")
            continue
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except Exception:  # not YAML: keep the text
            value = raw
        items[key.strip()] = value
    if problems:
        raise JobSpecError(problems)
    return items
