"""Evaluation log files read straight into numpy arrays, and the binary companion encoding (``.npz``).

A log of 50,000 points × 1,000 classes is 258 MB of JSON; building one pydantic object per point (and
one Python int per count) beside the arrays took 16–28× the file in memory. :func:`read_log` streams
the points instead (ijson's C parser), writes each point's counts into preallocated numpy rows, checks
the contract on the arrays, and hashes the log's canonical JSON from the arrays (orjson) without a
second serialisation through pydantic. Whenever the fast path sees anything it does not vouch for
(an accuracy-only log, a number with a fraction, an unknown key, a contract violation), it hands over
to :meth:`EvaluationLog.load`, so every error message is the contract's own.

The ``.npz`` companion (:func:`write_log` with ``format="npz"``) holds the same log: the counts as
``correct``/``total`` (``P × C`` integers), ``iteration``/``task``/``task_end`` (length ``P``) and the
rest of the log as the JSON member ``header`` (the log without its points). It is read with
``allow_pickle=False``, every member's shape and dtype checked from its ``.npy`` header before any data
is read, and errors name the member.
"""

from __future__ import annotations

import hashlib
import json
import re
import zipfile
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np
from pydantic import ValidationError

from clgate.documents import dump_log, load_log
from clgate.metrics.arrays import LogArrays, TaskAccuracy
from clgate.schemas.errors import problems_of
from clgate.schemas.evaluation_log import MAX_COUNT, EvaluationLog, EvaluationLogError

__all__ = [
    "LOG_FORMATS",
    "NPZ_THRESHOLD_CELLS",
    "log_sha256",
    "read_log",
    "write_log",
]

LogFormat = Literal["json", "jsonl", "npz", "auto"]
LOG_FORMATS: Final = ("json", "jsonl", "npz", "auto")
NPZ_THRESHOLD_CELLS: Final = 10_000_000
"""``format="auto"`` writes the ``.npz`` companion beside the JSON above this many points × classes
(10 million cells: about 50 MB of JSON, e.g. 10,000 points × 1,000 classes)."""
MAX_NPZ_CELLS: Final = 500_000_000
"""A ``.npz`` log declaring more points × classes than this is refused before anything is read."""

_CHUNK = 1 << 20
_POINT_KEYS = frozenset({"iteration", "task", "task_end", "correct", "total"})
_REQUIRED_KEYS = frozenset({"iteration", "task", "correct", "total"})
_POINTS_KEY = re.compile(rb'"points"\s*:\s*\[')


class _Fallback(Exception):
    """The fast path does not vouch for this file; the pydantic path decides (and names the error)."""


# ---------------------------------------------------------------------------------------------- reading
def read_log(path: str | Path, *, task_accuracy: TaskAccuracy = "macro") -> LogArrays:
    """Read and validate a log file (``.json``, ``.jsonl`` or ``.npz``) into :class:`LogArrays`.

    The arrays carry the log's header (``arrays.header``); :func:`clgate.policy.log_hash` of them is
    the hash of the parsed log. Raises :class:`EvaluationLogError` naming
    the file, the field (or ``.npz`` member) and the reason.
    """
    path = Path(path)
    if path.suffix == ".npz":
        return _read_npz(path, task_accuracy)
    if path.suffix == ".json":
        try:
            return _read_json_fast(path, task_accuracy)
        except _Fallback:
            pass
        except OSError as exc:
            raise EvaluationLogError([f"cannot read file: {exc.strerror or exc}"], str(path)) from exc
    log = load_log(path)
    return _attach(LogArrays.from_log(log, task_accuracy=task_accuracy), _header_of(log), None)


def _header_of(log: EvaluationLog) -> EvaluationLog:
    return log.model_copy(update={"points": []})


def _attach(arrays: LogArrays, header: EvaluationLog, sha256: str | None) -> LogArrays:
    """The arrays with the log's header; the hash is computed when a decision asks for it
    (:func:`clgate.policy.log_hash`), not on every read."""
    from dataclasses import replace

    return replace(arrays, header=header, sha256=sha256)


class _PointsSpan:
    """A binary file wrapper for ijson that keeps the bytes outside the top-level ``points`` array.

    The points array is found by its key and closed by bracket counting; that is exact whenever the
    points hold only numbers, booleans and the known keys, which the fast path checks on every point.
    """

    def __init__(self, raw: Any, sink: Any = None) -> None:
        self.raw = raw
        self.sink = sink  # called with the bytes inside the points array, in order
        self.head = bytearray()
        self.tail = bytearray()
        self.state = 0  # 0 before the points array, 1 inside it, 2 after it
        self.depth = 0
        self.suspicious = False
        self.last = b""
        self.consumed = 0

    def read(self, n: int = -1) -> bytes:
        if n == 0:
            return b""  # ijson's probe: bytes or text?
        chunk = self.raw.read(_CHUNK if n is None or n < 0 else max(n, _CHUNK))
        self.consumed += len(chunk)
        self._scan(chunk)
        return chunk

    def _scan(self, chunk: bytes) -> None:
        if self.state == 0:
            self.head += chunk
            m = _POINTS_KEY.search(self.head)
            if m is None:
                return
            rest = bytes(self.head[m.end() :])
            del self.head[m.end() :]
            self.state, self.depth = 1, 1
            chunk = rest
        if self.state == 1:
            a = np.frombuffer(chunk, dtype=np.uint8)
            marks = np.flatnonzero((a == 0x5B) | (a == 0x5D))
            depth = self.depth + np.cumsum(np.where(a[marks] == 0x5B, 1, -1))
            closing = np.flatnonzero(depth == 0)
            end = int(marks[closing[0]]) if len(closing) else len(chunk)
            self._inside(chunk[:end])
            if len(closing) == 0:
                self.depth = int(depth[-1]) if len(depth) else self.depth
                return
            self.state = 2
            chunk = chunk[end:]
        self.tail += chunk

    def _inside(self, region: bytes) -> None:
        window = self.last + region
        if b"." in region or b"e-" in window or b"E-" in window or b"\\" in region:
            self.suspicious = True  # a fraction (pydantic refuses it, numpy would truncate it)
        self.last = region[-1:]
        if self.sink is not None:
            self.sink(region)

    def header(self) -> dict[str, Any]:
        if self.state != 2:
            raise _Fallback
        try:
            doc = json.loads(bytes(self.head) + bytes(self.tail))
        except (ValueError, UnicodeDecodeError):
            raise _Fallback from None
        if not isinstance(doc, dict) or doc.get("points") != []:
            raise _Fallback
        return doc


def _read_json_fast(path: Path, task_accuracy: TaskAccuracy) -> LogArrays:
    import ijson

    size = path.stat().st_size
    with path.open("rb") as f:
        span = _PointsSpan(f)
        first = f.read(_CHUNK)
        f.seek(0)
        m = re.search(rb'"tasks"\s*:\s*(\[[\d\s,\[\]]*\])', first)
        if m is None:
            raise _Fallback  # tasks not up front: the general path
        try:
            n_classes = sum(len(t) for t in json.loads(m.group(1)))
        except (ValueError, TypeError):
            raise _Fallback from None
        cols = _PointColumns(max_points=size // max(4 * n_classes - 2, 1) + 1, n_classes=n_classes)
        try:
            doc = _read_compact(f, cols)
        except _Fallback:  # another layout: ijson reads it
            f.seek(0)
            cols.n = 0
            try:
                for p in ijson.items(span, "points.item"):
                    cols.add(p)
            except (ijson.JSONError, ijson.IncompleteJSONError, ValueError, TypeError, OverflowError):
                raise _Fallback from None
            if span.suspicious:
                raise _Fallback from None
            doc = span.header()
    return _finish(cols, doc, task_accuracy)


def _read_compact(f: Any, cols: _PointColumns) -> dict[str, Any]:
    """The points parsed with numpy into ``cols``, batch by batch, when they are laid out as clgate and
    Python's ``json`` write them (keys in order, no fractions, no signs); returns the rest of the
    document. Anything else raises :class:`_Fallback`."""
    parser = _CompactPoints(cols)
    span = _PointsSpan(f, sink=parser.feed)
    while span.read(_CHUNK):
        pass
    parser.close()
    if span.suspicious:
        raise _Fallback
    return span.header()


class _CompactPoints:
    """Points of a known layout parsed without Python objects: the bytes are checked against the
    layout with the digits and white space removed, then every digit run becomes one number."""

    def __init__(self, cols: _PointColumns) -> None:
        self.cols = cols
        self.buffer = b""
        self.first = True
        n = cols.n_classes
        lists = b"[" + b"," * (n - 1) + b"]"
        self.templates = {
            flag: b'{"iteration":,"task":,"task_end":%s,"correct":%s,"total":%s}' % (flag, lists, lists)
            for flag in (b"true", b"false")
        }
        self.with_accuracy = {f: t[:-1] + b',"accuracy":null}' for f, t in self.templates.items()}
        self.runs_per_point = 2 + 2 * n

    def feed(self, data: bytes) -> None:
        self.buffer += data
        cut = self.buffer.rfind(b"}")
        if cut < 0:
            return
        batch, self.buffer = self.buffer[: cut + 1], self.buffer[cut + 1 :]
        self._parse(batch)

    def close(self) -> None:
        if self.buffer.strip():
            raise _Fallback

    def _parse(self, batch: bytes) -> None:
        flags = _TASK_END.findall(batch)
        skeleton = batch.translate(None, b"0123456789 \n\r\t")
        lead = b"" if self.first else b","
        templates = self.templates if not skeleton.endswith(b"null}") else self.with_accuracy
        if skeleton != lead + b",".join(templates[f] for f in flags):
            raise _Fallback
        self.first = False
        values = _digit_runs(batch)
        k = len(flags)
        if values is None or len(values) != k * self.runs_per_point:
            raise _Fallback
        values = values.reshape(k, self.runs_per_point)
        cols, i, n = self.cols, self.cols.n, self.cols.n_classes
        if i + k > len(cols.iteration) or (n and int(values[:, 2:].max(initial=0)) >= 2**31):
            raise _Fallback
        cols.iteration[i : i + k] = values[:, 0]
        cols.task[i : i + k] = values[:, 1]
        cols.task_end[i : i + k] = [f == b"true" for f in flags]
        cols.correct[i : i + k] = values[:, 2 : 2 + n]
        cols.total[i : i + k] = values[:, 2 + n :]
        cols.n = i + k


def _digit_runs(batch: bytes) -> np.ndarray | None:
    """Every maximal run of ASCII digits in ``batch`` as an int64 (``None`` for a leading zero or a
    number of more than 18 digits: JSON forbids the one, int64 cannot hold the other)."""
    a = np.frombuffer(batch, dtype=np.uint8)
    digits = a - np.uint8(0x30)  # wraps: every non-digit becomes > 9
    digit = digits <= 9
    if not len(a):
        return np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(digit[1:] > digit[:-1]) + 1
    ends = np.flatnonzero(digit[1:] < digit[:-1]) + 1
    if digit[0]:
        starts = np.r_[0, starts]
    if digit[-1]:
        ends = np.r_[ends, len(a)]
    lengths = ends - starts
    longest = int(lengths.max(initial=0))
    if longest > 18 or ((digits[starts] == 0) & (lengths > 1)).any():
        return None
    values = digits[starts].astype(np.int64)
    padded = np.r_[digits, np.full(longest, 10, dtype=np.uint8)]  # runs end at a non-digit
    for j in range(1, longest):
        values = np.where(lengths > j, values * 10 + padded[starts + j], values)
    return values


_TASK_END: Final = re.compile(rb'"task_end"\s*:\s*(true|false)')


class _PointColumns:
    """Points written straight into numpy rows (capacity reserved, pages touched only when filled)."""

    def __init__(self, *, max_points: int, n_classes: int) -> None:
        self.n = 0
        self.n_classes = n_classes
        self.iteration = np.empty(max_points, dtype=np.int64)
        self.task = np.empty(max_points, dtype=np.int64)
        self.task_end = np.empty(max_points, dtype=bool)
        self.correct = np.empty((max_points, n_classes), dtype=np.int32)
        self.total = np.empty((max_points, n_classes), dtype=np.int32)

    def add(self, p: Any) -> None:
        i = self.n
        if not isinstance(p, dict) or not _REQUIRED_KEYS <= p.keys() <= _POINT_KEYS:
            raise _Fallback
        correct, total = p.get("correct"), p.get("total")
        it, task, end = p.get("iteration"), p.get("task"), p.get("task_end", False)
        if type(it) is not int or type(task) is not int or type(end) is not bool:
            raise _Fallback
        if type(correct) is not list or type(total) is not list:
            raise _Fallback
        if len(correct) != self.n_classes or len(total) != self.n_classes or i >= len(self.iteration):
            raise _Fallback
        self.iteration[i], self.task[i], self.task_end[i] = it, task, end
        self.correct[i] = correct
        self.total[i] = total
        self.n = i + 1


def _finish(cols: _PointColumns, doc: dict[str, Any], task_accuracy: TaskAccuracy) -> LogArrays:
    partial = doc.get("partial", False)
    if type(partial) is not bool:
        raise _Fallback
    try:
        header = EvaluationLog.model_validate({**doc, "points": [], "partial": True})
    except ValueError:
        raise _Fallback from None
    header = header.model_copy(update={"partial": partial})
    if header.n_classes != cols.n_classes:
        raise _Fallback
    n = cols.n
    arrays = _build(
        header,
        cols.iteration[:n],
        cols.task[:n],
        cols.task_end[:n],
        cols.correct[:n],
        cols.total[:n],
        task_accuracy,
    )
    if contract_problems(arrays, header):
        raise _Fallback
    return _attach(arrays, header, None)


def _build(
    header: EvaluationLog,
    iteration: np.ndarray,
    task: np.ndarray,
    task_end: np.ndarray,
    correct: np.ndarray,
    total: np.ndarray,
    task_accuracy: TaskAccuracy,
) -> LogArrays:
    """:class:`LogArrays` from columns (the same tensors as :meth:`LogArrays.from_log`)."""
    return LogArrays.from_columns(
        header,
        iteration=iteration,
        task=task,
        task_end=task_end,
        correct=correct,
        total=total,
        task_accuracy=task_accuracy,
    )


# ---------------------------------------------------------------------------------------------- contract
def contract_problems(a: LogArrays, header: EvaluationLog) -> list[str]:
    """The rules of the log contract that concern the points, checked on the arrays.

    Returns ``path: reason`` lines (the first few); empty when the points keep the contract.
    """
    problems: list[str] = []
    it, task = a.iterations, a.point_task + 1
    n_tasks = a.n_tasks
    _first(problems, np.flatnonzero(np.diff(it) <= 0) + 1, lambda i: f"points[{i}].iteration: not increasing")
    _first(problems, np.flatnonzero(task < 1), lambda i: f"points[{i}].task: must be ≥ 1")
    _first(problems, np.flatnonzero(task > n_tasks), lambda i: f"points[{i}].task: task does not exist")
    _first(problems, np.flatnonzero(np.diff(task) < 0) + 1, lambda i: f"points[{i}].task: goes backwards")
    _first(problems, np.flatnonzero(it < 0), lambda i: f"points[{i}].iteration: must be ≥ 0")
    if problems:
        return problems
    ends = a.task_end_idx
    end_tasks = task[ends]
    if len(np.unique(end_tasks)) != len(end_tasks):
        problems.append("points: a task has several task_end points")
    last_of_task = np.flatnonzero(np.r_[task[1:] != task[:-1], True]) if len(task) else np.zeros(0, int)
    if not np.isin(ends, last_of_task).all():
        problems.append("points: a task_end point is not the last point of its task")
    trained = np.unique(task)
    if not np.isin(trained[:-1], end_tasks).all():
        problems.append("points: a task ended without a task_end point")
    finished = set(end_tasks.tolist())
    unfinished = [k for k in range(1, n_tasks + 1) if k not in finished]
    if unfinished and not header.partial:
        problems.append(f"points: task(s) {unfinished[:8]} have no task_end point")
    elif unfinished and finished and min(unfinished) < max(finished):
        problems.append("points: unfinished tasks before finished ones")
    problems += _count_problems(a)
    if header.resources is not None:
        expected = n_tasks if not header.partial else len(finished)
        got = len(header.resources)
        if got != expected and not (header.partial and got >= len(finished)):
            problems.append(f"resources: {got} entries, expected one per task ({expected})")
    return problems


def _count_problems(a: LogArrays) -> list[str]:
    problems: list[str] = []
    assert a.correct is not None and a.total is not None
    for name, values in (("correct", a.correct), ("total", a.total)):
        if values.size and values.dtype.kind == "i" and values.min() < 0:  # a full index only then
            i, c = np.argwhere(values < 0)[0]
            problems.append(f"points[{i}].{name}[{c}]: count ({values[i, c]}) is negative")
        if values.size and values.max() > MAX_COUNT:
            i, c = np.argwhere(values > MAX_COUNT)[0]
            problems.append(f"points[{i}].{name}[{c}]: count ({values[i, c]:.3g}) is above 2**53")
    over = np.greater(a.correct, a.total)
    if over.any():
        i, c = np.unravel_index(int(over.argmax()), over.shape)
        problems.append(
            f"points[{i}].correct[{c}]: correct ({a.correct[i, c]}) exceeds total ({a.total[i, c]})"
        )
    del over
    if a.finished_tasks:
        ends = a.task_end_idx
        seen = a.class_task[None, :] <= a.point_task[ends][:, None]
        missing = np.argwhere(seen & (a.total[ends] == 0))
        if len(missing):
            k, c = missing[0]
            problems.append(
                f"points[{ends[k]}]: task-end point of task {a.point_task[ends[k]] + 1} does not evaluate "
                f"class(es) {c} of tasks 1 … {a.point_task[ends[k]] + 1}"
            )
    return problems


def _first(problems: list[str], idx: np.ndarray, text: Any) -> None:
    if len(idx):
        problems.append(text(int(idx[0])))


# ---------------------------------------------------------------------------------------------- hashing
def log_sha256(arrays: LogArrays) -> str:
    """sha256 of the log's canonical JSON (``EvaluationLog.model_dump_json``, ``diverged`` left out
    while null), computed piece by piece from the header and the count arrays."""
    if arrays.header is None or arrays.correct is None or arrays.total is None:
        raise ValueError("log hash: needs the log's header and its counts")
    digest = hashlib.sha256()
    for piece in canonical_json_pieces(arrays):
        digest.update(piece)
    return digest.hexdigest()


def canonical_json_pieces(arrays: LogArrays) -> Iterator[bytes]:
    """The bytes of ``log.model_dump_json(exclude={"diverged"} if null)``, in pieces."""
    import orjson

    header = arrays.header
    assert header is not None and arrays.correct is not None and arrays.total is not None
    unset = {"diverged"} if header.diverged is None else None
    text = header.model_dump_json(exclude=unset).encode("utf-8")
    marker = b',"points":[]'
    cut = text.index(marker) + len(marker) - 1
    yield text[:cut]
    opt = orjson.OPT_SERIALIZE_NUMPY
    end = (b"false", b"true")
    is_end = np.zeros(arrays.n_points, dtype=bool)
    is_end[arrays.task_end_idx] = True
    flags = is_end.tolist()
    for i in range(arrays.n_points):
        yield b"," if i else b""
        yield b'{"iteration":%d,"task":%d,"task_end":%s,"correct":' % (
            arrays.iterations[i],
            arrays.point_task[i] + 1,
            end[flags[i]],
        )
        yield orjson.dumps(arrays.correct[i], option=opt)
        yield b',"total":'
        yield orjson.dumps(arrays.total[i], option=opt)
        yield b',"accuracy":null}'
    yield text[cut:]


# ---------------------------------------------------------------------------------------------- writing
def write_log(
    log: EvaluationLog | LogArrays,
    path: str | Path,
    *,
    format: LogFormat = "auto",
    threshold_cells: int = NPZ_THRESHOLD_CELLS,
) -> list[Path]:
    """Write ``log`` (a validated log, or arrays read by :func:`read_log`) and return the files written.

    ``json``/``jsonl``: the log as JSON (JSON Lines); ``npz``: the binary encoding only (a ``.npz``
    path); ``auto``: JSON at ``path``, plus the ``.npz`` companion beside it (same stem) when the
    log has more than ``threshold_cells`` points × classes and carries counts. Atomic (write, rename).
    """
    if format not in LOG_FORMATS:
        raise ValueError(f"format: must be one of {', '.join(LOG_FORMATS)}, got {format!r}")
    path = Path(path)
    if format == "npz":
        _write_npz(_as_arrays(log), path)
        return [path]
    if format == "jsonl" or (format == "auto" and path.suffix == ".jsonl"):
        dump_log(_as_log(log), path)
        return [path]
    written = [path]
    if isinstance(log, EvaluationLog):
        dump_log(log, path)
    else:
        _atomic(path, lambda f: f.writelines(canonical_json_pieces(log)))
    if format == "auto" and _cells(log) > threshold_cells and _has_counts(log):
        companion = path.with_suffix(".npz")
        _write_npz(_as_arrays(log), companion)
        written.append(companion)
    return written


def _cells(log: EvaluationLog | LogArrays) -> int:
    if isinstance(log, EvaluationLog):
        return len(log.points) * log.n_classes
    return log.n_points * log.n_classes


def _has_counts(log: EvaluationLog | LogArrays) -> bool:
    if isinstance(log, EvaluationLog):
        return all(p.correct is not None for p in log.points)
    return log.correct is not None


def _as_arrays(log: EvaluationLog | LogArrays) -> LogArrays:
    if isinstance(log, LogArrays):
        if log.header is None or log.correct is None:
            raise ValueError("npz: the arrays need the log's header and counts (read them with read_log)")
        return log
    if not _has_counts(log):
        raise ValueError("npz: the binary encoding holds correct/total counts; this log has accuracies")
    return _attach(LogArrays.from_log(log), _header_of(log), None)


def _as_log(log: EvaluationLog | LogArrays) -> EvaluationLog:
    if isinstance(log, EvaluationLog):
        return log
    return EvaluationLog.model_validate_json(b"".join(canonical_json_pieces(log)))


def _atomic(path: Path, write: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as f:
        write(f)
    tmp.replace(path)


def _write_npz(arrays: LogArrays, path: Path) -> None:
    assert arrays.header is not None and arrays.correct is not None and arrays.total is not None
    unset = {"diverged"} if arrays.header.diverged is None else None
    header = arrays.header.model_dump_json(exclude=unset).encode("utf-8")
    is_end = np.zeros(arrays.n_points, dtype=bool)
    is_end[arrays.task_end_idx] = True
    members: dict[str, np.ndarray] = {
        "header": np.frombuffer(header, dtype=np.uint8),
        "iteration": arrays.iterations.astype(np.int64, copy=False),
        "task": (arrays.point_task + 1).astype(np.int64, copy=False),
        "task_end": is_end,
        "correct": arrays.correct,
        "total": arrays.total,
    }
    _atomic(path, lambda f: np.savez_compressed(f, allow_pickle=False, **members))


# ---------------------------------------------------------------------------------------------- npz reading
_NPZ_MEMBERS: Final = ("header", "iteration", "task", "task_end", "correct", "total")
_MAX_HEADER_BYTES: Final = 64 << 20


def _read_npz(path: Path, task_accuracy: TaskAccuracy) -> LogArrays:
    """The ``.npz`` encoding, read safely: no pickles, shapes and dtypes checked before the data.

    The two ``P × C`` count members are inflated at the same time, in two threads (zlib releases the
    GIL), each straight into its array, chunk by chunk, in ``uint16`` while the counts fit in it (a
    held-out class of at most 65,535 samples: half the memory of the ``int32`` that is written).
    """
    fail = _npz_failer(path)
    try:
        with zipfile.ZipFile(path) as zf:
            names = sorted(n[:-4] for n in zf.namelist() if n.endswith(".npy"))
            if sorted(zf.namelist()) != sorted(f"{n}.npy" for n in _NPZ_MEMBERS):
                extra = sorted(set(zf.namelist()) - {f"{n}.npy" for n in _NPZ_MEMBERS})
                missing = [n for n in _NPZ_MEMBERS if n not in names]
                raise fail("members", f"expected {', '.join(_NPZ_MEMBERS)}; missing {missing}, extra {extra}")
            raw = {name: _npz_member(zf, name, fail) for name in _NPZ_MEMBERS[:4]}
            with ThreadPoolExecutor(max_workers=2, thread_name_prefix="clgate-npz") as pool:
                counts = list(pool.map(lambda name: _npz_member(zf, name, fail), _NPZ_MEMBERS[4:]))
            raw.update(zip(_NPZ_MEMBERS[4:], counts, strict=True))
    except (OSError, zipfile.BadZipFile, zlib.error) as exc:
        raise EvaluationLogError([f"not a readable .npz log: {exc}"], str(path)) from None
    header = _npz_header(raw.pop("header"), fail, str(path))
    n_points, n_classes = len(raw["iteration"]), header.n_classes
    for name in ("task", "task_end"):
        if raw[name].shape != (n_points,):
            raise fail(name, f"shape {raw[name].shape}, expected ({n_points},) like iteration")
    for name in ("correct", "total"):
        if raw[name].shape != (n_points, n_classes):
            raise fail(
                name, f"shape {raw[name].shape}, expected (points, classes) = ({n_points}, {n_classes})"
            )
    arrays = LogArrays.from_columns(header, task_accuracy=task_accuracy, **raw)
    problems = contract_problems(arrays, header)
    if problems:
        raise EvaluationLogError(problems, str(path))
    return _attach(arrays, header, None)


def _npz_failer(path: Path) -> Any:
    def fail(member: str, reason: str) -> EvaluationLogError:
        return EvaluationLogError([f"{member}: {reason}"], str(path))

    return fail


_DTYPES: Final = {
    "header": ("u",),
    "iteration": ("i", "u"),
    "task": ("i", "u"),
    "task_end": ("b",),
    "correct": ("i", "u"),
    "total": ("i", "u"),
}
_NDIM: Final = {"header": 1, "iteration": 1, "task": 1, "task_end": 1, "correct": 2, "total": 2}


def _npz_member(zf: zipfile.ZipFile, name: str, fail: Any) -> np.ndarray:
    """One member: its ``.npy`` header (dtype, shape) judged before its data is read."""
    fmt = np.lib.format
    with zf.open(f"{name}.npy") as fp:
        try:
            version = fmt.read_magic(fp)
            if version == (1, 0):
                shape, fortran, dtype = fmt.read_array_header_1_0(fp)
            else:
                shape, fortran, dtype = fmt.read_array_header_2_0(fp)
        except ValueError as exc:
            raise fail(name, f"not a .npy array ({exc})") from None
        if dtype.hasobject or dtype.kind not in _DTYPES[name] or dtype.itemsize > 8:
            raise fail(name, f"dtype {dtype} is not allowed (expected {'/'.join(_DTYPES[name])} kind)")
        if len(shape) != _NDIM[name]:
            raise fail(name, f"has {len(shape)} dimension(s), expected {_NDIM[name]}")
        cells = int(np.prod(shape, dtype=np.int64)) if shape else 1
        limit = _MAX_HEADER_BYTES if name == "header" else MAX_NPZ_CELLS
        if cells > limit:
            raise fail(name, f"{cells} entries exceed the limit of {limit}")
        sink = _CountSink(cells, dtype) if name in ("correct", "total") else _PlainSink(cells, dtype)
        done, step = 0, max(_READ_BYTES // dtype.itemsize, 1)
        while done < cells:
            want = min(step, cells - done)
            data = fp.read(want * dtype.itemsize)
            if len(data) != want * dtype.itemsize:
                raise fail(name, "the data is shorter than its header says")
            sink.put(done, np.frombuffer(data, dtype=dtype))
            done += want
    array = sink.result().reshape(shape, order="F" if fortran else "C")
    return _narrow(name, array, fail)


_READ_BYTES: Final = 1 << 22
"""A member's data is inflated and stored this many bytes at a time (numpy's own reader: 256 KiB)."""


class _PlainSink:
    """A member's entries stored as read."""

    def __init__(self, cells: int, dtype: np.dtype[Any]) -> None:
        self.out = np.empty(cells, dtype=dtype)

    def put(self, at: int, chunk: np.ndarray) -> None:
        self.out[at : at + len(chunk)] = chunk

    def result(self) -> np.ndarray:
        return self.out


class _CountSink:
    """Counts stored in ``uint16`` while every one read so far fits, else (from then on) in the
    narrowest of ``int32``/``int64`` that holds the written dtype; no second full-size copy is made."""

    def __init__(self, cells: int, dtype: np.dtype[Any]) -> None:
        self.cells, self.dtype = cells, dtype
        self.out: np.ndarray = np.empty(cells, dtype=np.uint16)

    def put(self, at: int, chunk: np.ndarray) -> None:
        if self.out.dtype == np.uint16 and len(chunk) and (chunk.min() < 0 or chunk.max() > _U16_MAX):
            fits32 = (self.dtype.kind == "i" and self.dtype.itemsize <= 4) or self.dtype.itemsize <= 2
            wide = np.empty(self.cells, dtype=np.int32 if fits32 else np.int64)
            wide[:at] = self.out[:at]
            self.out = wide
        self.out[at : at + len(chunk)] = chunk  # exact, but a uint64 above int64 (then a negative count)

    def result(self) -> np.ndarray:
        return self.out


_U16_MAX: Final = int(np.iinfo(np.uint16).max)


def _narrow(name: str, array: np.ndarray, fail: Any) -> np.ndarray:
    if name in ("header", "task_end"):
        return array
    if name in ("correct", "total"):
        if array.dtype != np.int64 or not array.size:
            return array  # uint16 or int32 (_CountSink)
        if int(array.min()) >= -(2**31) and int(array.max()) < 2**31:
            return array.astype(np.int32)
        return array  # the contract check names a negative count (a uint64 above the int64 range)
    if array.size and array.dtype.kind == "u" and int(array.max()) >= 2**63:
        raise fail(name, "values exceed the int64 range")
    return array.astype(np.int64, copy=False)


def _npz_header(raw: np.ndarray, fail: Any, source: str) -> EvaluationLog:
    try:
        doc = json.loads(raw.tobytes().decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise fail("header", f"not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("points", []) != []:
        raise fail("header", "must be a JSON object without points (the points are the arrays)")
    partial = doc.get("partial", False)
    if type(partial) is not bool:
        raise fail("header", "partial: must be true or false")
    try:
        header = EvaluationLog.model_validate({**doc, "points": [], "partial": True})
    except ValueError as exc:
        problems = problems_of(exc) if isinstance(exc, ValidationError) else [str(exc)]
        raise EvaluationLogError([f"header: {p}" for p in problems], source) from None
    return header.model_copy(update={"partial": partial})
