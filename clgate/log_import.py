"""A per-class results table from any framework → a ``clgate.evaluation-log/v1`` (``clgate import``).

The table is CSV (header row) or JSON Lines (one object a line), one row per class per evaluation:

| column | meaning |
|---|---|
| ``iteration`` | training updates done when evaluated (integer ≥ 0); one evaluation point per iteration |
| ``task`` | 1-based task being trained at that point |
| ``class`` | class id (``0 … C-1``) or class name |
| ``correct``, ``total`` | correct predictions and evaluated samples of the class |
| ``accuracy`` | instead of ``correct``: accuracy in [0, 1]; the count is rebuilt from it and the class's ``total`` |
| ``task_end`` | optional (true/false); default: the last point of each task is its task end |

Accuracies rounded to ``d`` decimals (``decimals=d``) give the one count that rounds to them, and
refuse a row where none or several do. Class sizes may come from outside the table (``totals``); a
table of accuracies without any size becomes a rates log (``accuracy`` points, no confidence bounds).

The task layout is the order in which classes are first evaluated (the classes first seen at task
``k``'s points form task ``k``), or given explicitly (``tasks``). Pure python: no torch.

New-instances (``scenario="ni"``) and mixed (``"nic"``) tables add a ``group`` column: the sample group
of the row's cell (class c on group g). The cells first evaluated during task ``k`` are task ``k``'s,
all of one group; or the layout is given as the job spec gives it (``groups``, and ``classes`` in NIC).

>>> rows = [
...     {"iteration": 5, "task": 1, "class": "cat", "correct": 9, "total": 10},
...     {"iteration": 5, "task": 1, "class": "dog", "correct": 7, "total": 10},
...     {"iteration": 9, "task": 2, "class": "cat", "accuracy": 0.5, "total": 10},
...     {"iteration": 9, "task": 2, "class": "dog", "correct": 6, "total": 10},
...     {"iteration": 9, "task": 2, "class": "eel", "correct": 8, "total": 10},
... ]
>>> log = log_from_rows(rows, source="demo")
>>> log.tasks, log.class_names, log.points[1].correct
([[0, 1], [2]], ['cat', 'dog', 'eel'], [5, 6, 8])
>>> rows = [
...     {"iteration": 5, "task": 1, "group": "day", "class": "cat", "correct": 9, "total": 10},
...     {"iteration": 5, "task": 1, "group": "day", "class": "dog", "correct": 8, "total": 10},
...     {"iteration": 9, "task": 2, "group": "day", "class": "cat", "correct": 7, "total": 10},
...     {"iteration": 9, "task": 2, "group": "day", "class": "dog", "correct": 8, "total": 10},
...     {"iteration": 9, "task": 2, "group": "night", "class": "cat", "correct": 6, "total": 10},
...     {"iteration": 9, "task": 2, "group": "night", "class": "dog", "correct": 9, "total": 10},
... ]
>>> log = log_from_rows(rows, source="demo", scenario="ni")
>>> log.tasks, log.class_of, log.groups, log.points[1].correct
([[0, 1], [2, 3]], [0, 1, 0, 1], ['day', 'night'], [7, 8, 6, 9])
"""  # noqa: E501 - a Markdown table row cannot be wrapped

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction
from itertools import islice
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import ValidationError

from clgate.schemas.errors import InputError, problems_of
from clgate.schemas.evaluation_log import MAX_COUNT, EvaluationLog
from clgate.schemas.job import ScenarioSpec

TableFormat = Literal["csv", "jsonl"]
ScenarioKind = Literal["nc", "ni", "nic"]
REQUIRED = ("iteration", "task", "class", "total")
KNOWN = {*REQUIRED, "correct", "accuracy", "task_end"}
GROUP = "group"
"""The column of a new-instances (NI/NIC) table that names the sample group of the row's cell."""
MAX_ROWS = 5_000_000
MAX_BYTES = 1 << 30
"""The largest table or ``--totals`` file read (1 GiB: far above ``MAX_ROWS`` rows of counts)."""


class TableError(InputError):
    """A table that cannot become a valid log; the message names the file, row and column."""


def table_format(path: Path, given: str | None = None) -> TableFormat:
    """``csv`` or ``jsonl``: as given, else from the file suffix."""
    fmt = (given or path.suffix.lstrip(".")).lower()
    if fmt in ("jsonl", "ndjson"):
        return "jsonl"
    if fmt == "csv":
        return "csv"
    raise TableError(
        f"{path}: unknown table format {fmt!r}; use a .csv or .jsonl file, or --format csv|jsonl"
    )


def read_table(path: str | Path, *, fmt: str | None = None) -> list[tuple[int, dict[str, Any]]]:
    """``(row number, row)`` pairs; CSV rows are numbered as lines (the header is line 1)."""
    path = Path(path)
    kind = table_format(path, fmt)
    text = _read_text(path, str(path))
    rows: list[tuple[int, dict[str, Any]]] = []
    if kind == "csv":
        reader = csv.DictReader(io.StringIO(text, newline=""))
        if reader.fieldnames is None:
            raise TableError(f"{path}: empty file (expected a header row: {', '.join(REQUIRED)}, correct)")
        _check_header(reader.fieldnames, str(path))
        try:
            for row in reader:
                if None in row:
                    raise TableError(f"{path}: row {reader.line_num}: more cells than header columns")
                rows.append((reader.line_num, {k.strip(): v for k, v in row.items() if k is not None}))
                if len(rows) > MAX_ROWS:
                    raise TableError(f"{path}: more than {MAX_ROWS} rows")
        except csv.Error as exc:
            raise TableError(f"{path}: row {reader.line_num}: {exc}") from None
    else:
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            obj = parse_json(line, f"{path}: row {number}")
            if not isinstance(obj, dict):
                raise TableError(f"{path}: row {number}: expected a JSON object, got {type(obj).__name__}")
            rows.append((number, obj))
            if len(rows) > MAX_ROWS:
                raise TableError(f"{path}: more than {MAX_ROWS} rows")
    if not rows:
        raise TableError(f"{path}: no rows")
    return rows


def _read_text(path: Path, where: str) -> str:
    """The UTF-8 text of a table or ``--totals`` file (a BOM dropped), refused past ``MAX_BYTES``."""
    try:
        if path.stat().st_size > MAX_BYTES:
            raise TableError(f"{where}: larger than {MAX_BYTES >> 20} MiB")
        return path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise TableError(f"{where}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise TableError(f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are all distinct: parsers differ on which of two values they keep."""
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise ValueError(f"key {key!r} given twice")
        obj[key] = value
    return obj


def _json_int(text: str) -> int:
    """A JSON integer; Python converts no more than 4300 digits, and its refusal names an interpreter
    setting, not the input."""
    if len(text) > 4300:
        raise ValueError(f"an integer of {len(text)} digits")
    return int(text)


def parse_json(text: str, where: str, *, invalid: str = "invalid JSON") -> Any:
    """JSON text (a row, a ``--totals`` file, a command-line option), refused as :class:`TableError`
    (``"<where>: <invalid> (<reason>)"``) when it is not JSON, nests deeper than the parser recurses,
    holds an integer of thousands of digits, or gives a key twice: a crash or a silently dropped value
    otherwise."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_int=_json_int)
    except json.JSONDecodeError as exc:
        reason = exc.msg
    except RecursionError:
        reason = "nested too deeply"
    except ValueError as exc:  # a key twice, an integer of thousands of digits
        reason = str(exc)
    raise TableError(f"{where}: {invalid} ({reason})")


def _check_header(fieldnames: Sequence[str], where: str) -> None:
    """A CSV header names each column once: the reader would keep the last cell of a repeated one."""
    counts = Counter(c.strip() for c in fieldnames)
    twice = sorted(c for c, n in counts.items() if n > 1)
    if twice:
        raise TableError(f"{where}: row 1: column(s) {twice[:10]} given twice")


def _shown(value: Any) -> str:
    """``repr(value)``, cut to 40 characters: a message names the cell, it does not echo a megabyte."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "…"


def _int(value: Any, where: str, *, minimum: int = 0) -> int:
    """An integer cell in ``[minimum, MAX_COUNT]`` (a whole float such as ``30.0`` is one)."""
    if isinstance(value, bool):
        raise TableError(f"{where}: expected an integer, got {value!r}")
    if isinstance(value, str):
        value = value.strip()
        try:
            number = int(value)
        except ValueError:
            raise TableError(f"{where}: expected an integer, got {_shown(value)}") from None
    elif isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    else:
        raise TableError(f"{where}: expected an integer, got {_shown(value)}")
    if number < minimum:
        raise TableError(f"{where}: must be ≥ {minimum}, got {number}")
    if number > MAX_COUNT:
        raise TableError(f"{where}: must be ≤ {MAX_COUNT} (2**53), got {_shown(value)}")
    return number


def _name(value: Any, where: str) -> str:
    """A class or group cell: a name or an integer id, never a list, object, boolean or float (which
    would become a name like ``"['cat']"``)."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise TableError(f"{where}: expected a name or an integer id, got {_shown(value)}")
    name = str(value).strip()
    if not name:
        raise TableError(f"{where}: empty")
    return name


def _fraction(value: Any, where: str) -> float:
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise TableError(f"{where}: expected a number in [0, 1], got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(number) or not 0 <= number <= 1:
        raise TableError(
            f"{where}: expected an accuracy in [0, 1] (a fraction, not a percentage), got {value!r}"
        )
    return number


def _bool(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no", ""):
        return False
    raise TableError(f"{where}: expected true or false, got {value!r}")


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


AmbiguousPolicy = Literal["refuse", "nearest"]
ACCURACY_SLACK = 1e-9
"""Float slack added to the rounding bound ``0.5·10^-d`` (a value like ``0.30000000000000004``)."""
WHOLE_COUNT_SLACK = 1e-7
"""Without ``decimals``: how far (× the class size) an accuracy × size may be from a whole count, for
an accuracy kept as a float32 (relative precision 6e-8)."""


def count_candidates(accuracy: float, total: int, decimals: int) -> range:
    """The counts ``correct`` in ``[0, total]`` whose ``correct / total`` rounds to ``accuracy`` at
    ``decimals`` decimals: ``|correct/total - accuracy| ≤ 0.5·10^-decimals`` (+ ``ACCURACY_SLACK``).

    >>> count_candidates(0.67, 3, 2), count_candidates(0.33, 100, 2), count_candidates(0.5, 250, 2)
    (range(2, 3), range(33, 34), range(124, 127))
    >>> len(count_candidates(0.1, 7, 2))  # 0/7 = 0.0 and 1/7 = 0.143: no count rounds to 0.10
    0
    """
    if total < 1:
        raise ValueError(f"total: must be ≥ 1 to rebuild a count, got {total}")
    if decimals < 0:
        raise ValueError(f"decimals: must be ≥ 0, got {decimals}")
    bound = 0.5 * 10.0**-decimals + ACCURACY_SLACK
    low = max(0, math.ceil((accuracy - bound) * total))
    high = min(total, math.floor((accuracy + bound) * total))
    return range(low, max(low, high + 1))


def nearest_count(accuracy: float, total: int, candidates: range) -> int:
    """The candidate nearest ``accuracy × total``; on a tie the lower count (the worse accuracy, which
    a gate should judge). Only the two counts around it can be nearest, since the candidates are a run
    of integers: a class of 10^12 samples takes no longer than one of 10.

    >>> nearest_count(0.5, 300, range(149, 152)), nearest_count(0.5, 3, range(0, 4))
    (150, 1)
    """
    written = Fraction(repr(accuracy))  # the decimal as written: a tie stays a tie (1/3 and 2/3 of 0.5)
    target = written * total
    near = {min(max(c, candidates[0]), candidates[-1]) for c in (math.floor(target), math.ceil(target))}
    return min(near, key=lambda c: (abs(Fraction(c, total) - written), c))


class _Record(NamedTuple):
    number: int
    iteration: int
    task: int
    name: str
    correct: int | None  # None in a rates log (accuracies only)
    total: int | None
    accuracy: float | None
    end: bool | None
    group: str | None = None  # NI/NIC: the sample group of the row's cell


class _Options(NamedTuple):
    source: str
    decimals: int | None
    totals: Mapping[str, int] | int | None
    on_ambiguous: AmbiguousPolicy
    rates: bool  # no row has a total and none was given: the log keeps the accuracies
    cells: bool = False  # an NI/NIC table: rows are cells (group, class)


def log_from_rows(
    rows: Iterable[Mapping[str, Any] | tuple[int, Mapping[str, Any]]],
    *,
    source: str = "table",
    tasks: Sequence[Sequence[int | str]] | None = None,
    meta: Mapping[str, Any] | None = None,
    decimals: int | None = None,
    totals: Mapping[str, int] | int | None = None,
    on_ambiguous: AmbiguousPolicy = "refuse",
    scenario: ScenarioKind = "nc",
    groups: Sequence[str] | None = None,
    classes: Sequence[Sequence[int | str]] | None = None,
) -> EvaluationLog:
    """Build and validate the log; raises :class:`TableError` naming ``source``, the row and the column.

    ``decimals``: the accuracies were rounded to that many decimals; a count is rebuilt from an
    accuracy when exactly one ``correct`` in ``[0, total]`` rounds to it (:func:`count_candidates`),
    or, with ``on_ambiguous="nearest"``, the nearest of several (ties: the lower count). ``totals``:
    each class's number of evaluated samples (class name → size, or one size for every class), for a
    table without a ``total`` column. A table with accuracies and no totals at all becomes a rates log
    (``accuracy`` points: no confidence bounds).

    ``scenario="ni"``/``"nic"``: the rows are cells, named by their ``group`` column and class; the log
    is over cells (``scenario``, ``class_of``, ``groups``). ``groups`` (the group of each task) and, in
    NIC, ``classes`` (the classes each task brings) give the layout instead of the order of first
    evaluation; ``totals`` may name a cell (``"cat @ night"``) or a class (every group's cell).
    """
    numbered = [r if isinstance(r, tuple) else (i + 2, r) for i, r in enumerate(rows)]
    if not numbered:
        raise TableError(f"{source}: no rows")
    _check_scenario_options(scenario, tasks=tasks, groups=groups, classes=classes)
    if decimals is not None and decimals < 0:
        raise TableError(f"--decimals: must be ≥ 0, got {decimals}")
    if isinstance(totals, int) and not 1 <= totals <= MAX_COUNT:
        raise TableError(f"--total: must be ≥ 1 and ≤ {MAX_COUNT} (2**53), got {totals}")
    if on_ambiguous not in ("refuse", "nearest"):
        raise TableError(f"--on-ambiguous: must be refuse or nearest, got {on_ambiguous!r}")
    rates = totals is None and not any("total" in r and not _blank(r["total"]) for _, r in numbered)
    if rates and decimals is not None:
        raise TableError(
            f"--decimals: rebuilding counts needs each class's size, and {source} has no total column: "
            "give --totals FILE or --total N (or leave --decimals out to import the accuracies as they are)"
        )
    options = _Options(source, decimals, totals, on_ambiguous, rates, cells=scenario != "nc")
    records = [_record(number, row, options) for number, row in numbered]
    if isinstance(totals, Mapping):
        named = {r.name for r in records} | {f"{r.name} @ {r.group}" for r in records if r.group is not None}
        unused = sorted(set(totals) - named)
        if unused:
            raise TableError(f"--totals: class(es) {unused[:10]} never appear in {source}")
    fields: dict[str, Any] = {}
    if scenario == "nc":
        ids = _class_ids(records, tasks, source)
        layout = _layout(records, ids, tasks, source)
        points = _points(records, lambda r: ids[r.name], len(ids), source)
    else:
        ids, cells = _cell_layout(records, scenario, groups, classes, source)
        layout, fields = cells.tasks, cells.fields()
        points = _points(records, cells.column(ids), len(cells.class_of), source, what=_cell_words)
    names = sorted(ids, key=ids.__getitem__)
    integer_ids = all(map(_is_id, names))  # then ids[n] is the integer n (_integer_ids)
    provenance = _provenance(records, options)
    try:
        return EvaluationLog.model_validate(
            {
                **fields,
                "class_names": None if integer_ids else names,
                "tasks": layout,
                "points": points,
                "meta": provenance | dict(meta or {}),
            }
        )
    except ValidationError as exc:
        raise TableError(
            f"{source}: the table does not make a valid log:\n  " + "\n  ".join(problems_of(exc))
        ) from None


def _provenance(records: list[_Record], options: _Options) -> dict[str, Any]:
    """The log's ``meta`` from the table: its source, a digest of its rows, how the counts were made."""
    rates = options.rates
    # counts tables keep the digest of earlier releases; a rates log has accuracies in place of counts
    kept: list[list[Any]] = [[r.iteration, r.task, r.name, r.correct, r.total, r.end] for r in records]
    if rates:
        kept = [[r.iteration, r.task, r.name, r.accuracy, r.end] for r in records]
    if options.cells:  # the cell tables' digest covers the groups too
        kept = [[*row, r.group] for row, r in zip(kept, records, strict=True)]
    digest = hashlib.sha256(json.dumps(kept).encode()).hexdigest()
    rebuilt = [r for r in records if r.accuracy is not None and r.correct is not None]
    provenance: dict[str, Any] = {
        "imported_from": options.source,
        "table_sha256": digest,
        "counts_from_accuracy": bool(rebuilt) and not rates,
    }
    if rates:
        provenance["accuracy_only"] = True
    if options.decimals is not None:
        provenance["accuracy_decimals"] = options.decimals
    return provenance


def _record(number: int, row: Mapping[str, Any], options: _Options) -> _Record:
    """One row, checked and with its count rebuilt from its accuracy where it has none."""
    where = f"{options.source}: row {number}"
    has_correct = "correct" in row and not _blank(row["correct"])
    has_accuracy = "accuracy" in row and not _blank(row["accuracy"])
    has_total = "total" in row and not _blank(row["total"])
    missing = [c for c in ("iteration", "task", "class") if c not in row or _blank(row[c])]
    if options.cells and (GROUP not in row or _blank(row[GROUP])):
        missing.append(f"{GROUP} (the sample group of the row's cell, for an ni/nic table)")
    if not has_correct and not has_accuracy:
        missing.append("correct (or accuracy)")
    if not has_total and options.totals is None and not (options.rates and not has_correct):
        missing.append("total (or --totals FILE / --total N for the class sizes)")
    if missing:
        raise TableError(f"{where}: missing column(s) {', '.join(missing)}")
    iteration = _int(row["iteration"], f"{where}, column 'iteration'")
    task = _int(row["task"], f"{where}, column 'task'", minimum=1)
    name = _name(row["class"], f"{where}, column 'class'")
    end = _bool(row["task_end"], f"{where}, column 'task_end'") if not _blank(row.get("task_end")) else None
    acc = _fraction(row["accuracy"], f"{where}, column 'accuracy'") if has_accuracy else None
    group = _name(row[GROUP], f"{where}, column '{GROUP}'") if options.cells else None
    if options.rates:
        return _Record(number, iteration, task, name, None, None, acc, end, group)
    total = _total(row, has_total, name if group is None else (name, group), where, options)
    at = f"{where} (class {name!r}, iteration {iteration}), column 'accuracy'"
    if has_correct:
        correct = _int(row["correct"], f"{where}, column 'correct'")
        if acc is not None and total:
            bound = 0.5 / total if options.decimals is None else 0.5 * 10.0**-options.decimals
            if abs(acc - correct / total) > bound + ACCURACY_SLACK:
                shown = "" if options.decimals is None else f" rounded to {options.decimals} decimals"
                raise TableError(f"{at}: {acc} disagrees with correct/total = {correct}/{total}{shown}")
    else:
        assert acc is not None
        correct = _rebuilt(acc, total, at, options)
    if correct > total:
        raise TableError(f"{where}, column 'correct': {correct} exceeds total {total}")
    return _Record(number, iteration, task, name, correct, total, acc, end, group)


def _total(
    row: Mapping[str, Any], has_total: bool, key: str | tuple[str, str], where: str, options: _Options
) -> int:
    """The row's ``total``, or the class's size from ``--totals``/``--total`` (both: they must agree).
    ``key``: the class's name, or (class, group) for a cell, whose size is the cell's or its class's."""
    given: int | None = None
    name = key if isinstance(key, str) else f"{key[0]} @ {key[1]}"
    if isinstance(options.totals, int):
        given = options.totals
    elif options.totals is not None:
        for candidate in (name, key[0]) if isinstance(key, tuple) else (name,):
            if candidate in options.totals:
                given = options.totals[candidate]
                break
        else:
            raise TableError(f"{where}, column 'class': class {name!r} has no size in --totals")
    if not has_total:
        assert given is not None
        return given
    total = _int(row["total"], f"{where}, column 'total'")
    if given is not None and given != total:
        raise TableError(f"{where}, column 'total': {total}, but the given size of class {name!r} is {given}")
    return total


def _rebuilt(acc: float, total: int, at: str, options: _Options) -> int:
    """``correct`` from an accuracy and the class size: exact (no ``decimals``), or the one count that
    rounds to it."""
    if total == 0:
        raise TableError(f"{at}: total is 0, so no accuracy can be given (leave the class's row out)")
    if options.decimals is None:
        exact = acc * total
        correct = round(exact)
        # a twentieth of a sample, plus float32 noise: a wider slack took any accuracy of a class of
        # 900 samples or more as a whole count (0.4305 × 1000 → 430), when it is a rounded one
        if abs(exact - correct) > 0.05 + WHOLE_COUNT_SLACK * total:
            raise TableError(
                f"{at}: {acc} × total {total} = {exact:.3f} is not a whole count (is 'total' the "
                "class's number of evaluated samples? if the accuracies were rounded, give --decimals N)"
            )
        return correct
    candidates = count_candidates(acc, total, options.decimals)
    if len(candidates) == 1:
        return candidates[0]
    d = options.decimals
    if not candidates:
        nearest = min(round(acc * total), total)
        raise TableError(
            f"{at}: {acc} is not any count out of total {total} rounded to {d} decimals (the nearest, "
            f"{nearest}/{total} = {nearest / total:.{d + 3}f}, is too far; is 'total' right, or --decimals?)"
        )
    if options.on_ambiguous == "nearest":
        return nearest_count(acc, total, candidates)
    shown = ", ".join(f"{c}/{total}" for c in candidates[:6]) + (" …" if len(candidates) > 6 else "")
    raise TableError(
        f"{at}: ambiguous: {acc} at {d} decimals is any of {shown}; give more decimals, or "
        "--on-ambiguous nearest to take the nearest count"
    )


def _class_ids(
    records: list[_Record],
    tasks: Sequence[Sequence[int | str]] | None,
    source: str,
    *,
    option: str = "--tasks",
) -> dict[str, int]:
    names = list(dict.fromkeys(r.name for r in sorted(records, key=lambda r: (r.iteration, r.number))))
    if all(map(_is_id, names)):
        return _integer_ids(names, source)
    if tasks is not None:
        flat = [str(c) for g in tasks for c in g]
        unknown = sorted(set(names) - set(flat))
        if unknown:
            raise TableError(f"{source}: class(es) {unknown[:10]} of the table are in no task of {option}")
        return {n: i for i, n in enumerate(flat)}
    return {n: i for i, n in enumerate(names)}  # ids in order of first evaluation


def _is_id(name: str) -> bool:
    """A class written as an integer id: ASCII digits (``'²'`` and ``'٠'`` are digits to ``str.isdigit``
    but a name, or no integer, to ``int``)."""
    return name.isascii() and name.isdigit()


def _integer_ids(names: list[str], source: str) -> dict[str, int]:
    """Integer class ids: exactly ``0 … C-1``, each written once (``'7'`` and ``'07'`` are one id)."""
    ids: dict[str, int] = {}
    by_id: dict[int, str] = {}
    for n in names:
        digits = n.lstrip("0") or "0"
        c = int(digits) if len(digits) <= len(str(MAX_ROWS)) else MAX_ROWS  # longer: past any id anyway
        if c < len(names) and c in by_id:  # larger ids are refused below, clashing or not
            raise TableError(f"{source}: column 'class': {by_id[c]!r} and {n!r} are both class id {c}")
        ids[n], by_id[c] = c, n
    odd = [_shown(n) for n in names if ids[n] >= len(names)]
    if odd:
        raise TableError(
            f"{source}: column 'class': integer class ids must be 0 … {len(names) - 1}; got "
            f"[{', '.join(odd[:10])}] (use class names, or renumber the classes from 0)"
        )
    return ids


def _layout(
    records: list[_Record], ids: dict[str, int], tasks: Sequence[Sequence[int | str]] | None, source: str
) -> list[list[int]]:
    if tasks is not None:
        layout = []
        for k, group in enumerate(tasks):
            try:
                layout.append([ids[str(c)] for c in group])
            except KeyError as exc:
                raise TableError(
                    f"{source}: --tasks[{k}]: class {exc.args[0]!r} never appears in the table"
                ) from None
        return layout
    first_task: dict[int, int] = {}
    for r in records:
        c = ids[r.name]
        first_task[c] = min(first_task.get(c, r.task), r.task)
    n_tasks = max(r.task for r in records)
    firsts = set(first_task.values())
    # a task bringing no class is found among the first len(firsts) + 1 tasks: no list of n_tasks
    empty = list(islice((k for k in range(1, n_tasks + 1) if k not in firsts), 10))
    if empty:
        raise TableError(
            f"{source}: task(s) {empty}{' …' if len(empty) == 10 else ''} evaluate no class that earlier "
            "tasks did not; the task layout cannot be inferred (were future tasks evaluated?): give it "
            "with --tasks '[[0,1],[2,3]]'"
        )
    brought: list[list[int]] = [[] for _ in range(n_tasks)]  # n_tasks ≤ classes: each brings one
    for c, t in sorted(first_task.items()):
        brought[t - 1].append(c)
    return brought


def _check_scenario_options(
    scenario: str,
    *,
    tasks: Sequence[Sequence[int | str]] | None,
    groups: Sequence[str] | None,
    classes: Sequence[Sequence[int | str]] | None,
) -> None:
    """The layout options that belong to the table's scenario, each refused by its name otherwise."""
    if scenario not in ("nc", "ni", "nic"):
        raise TableError(f"--scenario: nc, ni or nic, got {scenario!r}")
    if scenario == "nc":
        for option, value in (("--groups", groups), ("--classes", classes)):
            if value is not None:
                raise TableError(f"{option}: only with --scenario ni or nic (a table of sample groups)")
        return
    if tasks is not None:
        raise TableError(
            f"--tasks: the class groups of an nc table; with --scenario {scenario} give --groups (the group "
            "of each task)" + (" and --classes (the classes each brings)" if scenario == "nic" else "")
        )
    if scenario == "ni" and classes is not None:
        raise TableError("--classes: only with --scenario nic (in ni every task brings every class)")
    if scenario == "nic" and (groups is None) != (classes is None):
        raise TableError(
            "--groups and --classes: with --scenario nic give both (the group of each task and the classes "
            "it brings), or neither (the layout from the order of first evaluation)"
        )


class _Cells(NamedTuple):
    """An NI/NIC table's layout: task k's cells are the classes it brings on group ``groups[k]``."""

    kind: str
    tasks: list[list[int]]
    class_of: list[int]
    groups: list[str]
    cell_of: dict[tuple[str | None, int], int]

    def fields(self) -> dict[str, Any]:
        return {"scenario": self.kind, "class_of": self.class_of, "groups": self.groups}

    def column(self, ids: Mapping[str, int]) -> Callable[[_Record], int]:
        return lambda r: self.cell_of[(r.group, ids[r.name])]


def _cell_layout(
    records: list[_Record],
    kind: str,
    groups: Sequence[str] | None,
    classes: Sequence[Sequence[int | str]] | None,
    source: str,
) -> tuple[dict[str, int], _Cells]:
    """Class ids and cells: from ``groups``/``classes`` when given, else from the first evaluations;
    checked with the job spec's rules for groups (their names, what a group brings twice)."""
    named = [list(dict.fromkeys(str(c) for t in classes for c in t))] if classes is not None else None
    ids = _class_ids(records, named, source, option="--classes")
    if groups is None:
        order, brought = _first_evaluated_cells(records, ids, source)
    else:
        order = [str(g) for g in groups]
        present = {r.name for r in records}
        brought = _declared_classes(kind, len(order), classes, {n: ids[n] for n in present}, source)
    _check_groups(
        kind, order, brought, where="--groups" if groups is not None else f"{source}: column 'group'"
    )
    cell_of: dict[tuple[str | None, int], int] = {}
    tasks: list[list[int]] = []
    class_of: list[int] = []
    for group, task_classes in zip(order, brought, strict=True):
        tasks.append(list(range(len(class_of), len(class_of) + len(task_classes))))
        for c in task_classes:
            cell_of[(group, c)] = len(class_of)
            class_of.append(c)
    stray = next((r for r in records if (r.group, ids[r.name]) not in cell_of), None)
    if stray is not None:
        raise TableError(
            f"{source}: row {stray.number}, column 'group': {_cell_words(stray)} is in no task of --groups"
            + (" and --classes" if kind == "nic" else "")
        )
    return ids, _Cells(kind, tasks, class_of, order, cell_of)


def _first_evaluated_cells(
    records: list[_Record], ids: Mapping[str, int], source: str
) -> tuple[list[str], list[list[int]]]:
    """Each task's group and classes: the cells first evaluated during task k, all of one group."""
    first: dict[tuple[str, int], int] = {}
    for r in records:
        key = (str(r.group), ids[r.name])
        first[key] = min(first.get(key, r.task), r.task)
    hint = 'give the layout with --groups \'["day","night"]\' (and --classes with --scenario nic)'
    order: list[str] = []
    brought: list[list[int]] = []
    for k in range(1, max(r.task for r in records) + 1):
        new = sorted(key for key, task in first.items() if task == k)
        names = sorted({group for group, _ in new})
        if not new:
            raise TableError(
                f"{source}: task {k} evaluates no cell (a class on a group) that earlier tasks did not; "
                f"the layout cannot be inferred (were future tasks evaluated?): {hint}"
            )
        if len(names) > 1:
            raise TableError(
                f"{source}: task {k} first evaluates cells of groups {', '.join(map(repr, names))}, but a "
                f"task brings one sample group (were future tasks evaluated?): {hint}"
            )
        order.append(names[0])
        brought.append([c for _, c in new])
    return order, brought


def _declared_classes(
    kind: str,
    n_tasks: int,
    classes: Sequence[Sequence[int | str]] | None,
    ids: Mapping[str, int],
    source: str,
) -> list[list[int]]:
    """The classes each task brings: every class in NI, ``--classes`` (ids or names) in NIC; ``ids``:
    those of the classes in the table."""
    if kind == "ni" or classes is None:
        return [sorted(set(ids.values())) for _ in range(n_tasks)]
    brought = []
    for k, task_classes in enumerate(classes):
        try:
            brought.append([ids[str(c)] for c in task_classes])
        except KeyError as exc:
            raise TableError(f"--classes[{k}]: class {exc.args[0]!r} never appears in {source}") from None
    return brought


def _check_groups(kind: str, order: list[str], brought: list[list[int]], *, where: str) -> None:
    """The job spec's rules: group names (no '@', which names a cell), one task per group in NI, a
    group never bringing a class twice in NIC; problems about ``groups`` are told at ``where``."""
    try:
        ScenarioSpec(type=kind, groups=order, classes=brought if kind == "nic" else None)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = [_told_at(p, where) for p in problems_of(exc)]
        raise TableError("\n".join(problems)) from None


def _told_at(problem: str, where: str) -> str:
    """A scenario problem with the option (or column) the user gave: ``--groups``, ``--classes[k]``."""
    if problem.startswith("groups:"):
        return where + problem.removeprefix("groups")
    return f"--{problem}" if problem.startswith("classes") else problem


def _class_words(r: _Record) -> str:
    return f"class {r.name!r}"


def _cell_words(r: _Record) -> str:
    return f"class {r.name!r} of group {r.group!r}"


def _points(
    records: list[_Record],
    column_of: Callable[[_Record], int],
    n_classes: int,
    source: str,
    *,
    what: Callable[[_Record], str] = _class_words,
) -> list[dict[str, Any]]:
    """One point per iteration; ``column_of(row)``: the row's position in the counts (its class, or
    its cell); ``what(row)`` names it in an error."""
    by_iteration: dict[int, dict[str, Any]] = {}
    rates = any(r.correct is None for r in records)  # then none has counts (a rates log)
    for record in sorted(records, key=lambda r: (r.iteration, r.number)):
        number, iteration, task, correct, total, end = (
            record.number,
            record.iteration,
            record.task,
            record.correct,
            record.total,
            record.end,
        )
        point = by_iteration.get(iteration)
        if point is None:
            values: dict[str, list[Any]] = (
                {"accuracy": [None] * n_classes}
                if rates
                else {"correct": [0] * n_classes, "total": [0] * n_classes}
            )
            point = by_iteration[iteration] = {
                "iteration": iteration,
                "task": task,
                "task_end": end,
                **values,
                "_rows": {},
                "_first": number,
            }
        where = f"{source}: row {number}"
        if task != point["task"]:
            raise TableError(
                f"{where}, column 'task': task {task} at iteration {iteration}, but row {point['_first']} "
                f"says task {point['task']} (one task per iteration)"
            )
        if end is not None and point["task_end"] is not None and end != point["task_end"]:
            raise TableError(
                f"{where}, column 'task_end': disagrees with row {point['_first']} at iteration {iteration}"
            )
        if end is not None:
            point["task_end"] = end
        c = column_of(record)
        if c in point["_rows"]:
            raise TableError(
                f"{where}, column 'class': {what(record)} already given at iteration {iteration} "
                f"(row {point['_rows'][c]})"
            )
        point["_rows"][c] = number
        if rates:
            point["accuracy"][c] = record.accuracy
        else:
            point["correct"][c] = correct
            point["total"][c] = total
    points = [by_iteration[i] for i in sorted(by_iteration)]
    explicit = any(p["task_end"] is not None for p in points)
    for i, p in enumerate(points):
        if not explicit:
            p["task_end"] = i == len(points) - 1 or points[i + 1]["task"] != p["task"]
        elif p["task_end"] is None:
            p["task_end"] = False
        del p["_rows"], p["_first"]
    return points


def rows_from_log(log: EvaluationLog) -> list[dict[str, Any]]:
    """The table of a log with counts: one row per evaluated class per point (the inverse of import).
    An NI/NIC log's rows are its cells: a ``group`` column (the group's name, else ``task k``) beside
    the class."""
    cells = log.class_of is not None
    class_of, task_of = log.classes_of_cells(), log.task_of_cells()
    rows = []
    for p in log.points:
        if p.correct is None or p.total is None:
            raise TableError("the log has accuracies only; a table needs correct/total counts")
        for c, (correct, total) in enumerate(zip(p.correct, p.total, strict=False)):
            if total:
                where = {GROUP: log.group_label(task_of[c])} if cells else {}
                rows.append(
                    {
                        "iteration": p.iteration,
                        "task": p.task,
                        **where,
                        "class": log.class_label(class_of[c]),
                        "correct": correct,
                        "total": total,
                        "task_end": p.task_end,
                    }
                )
    return rows


def write_table(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Write rows as CSV or JSON Lines (by suffix)."""
    path = Path(path)
    if table_format(path) == "jsonl":
        path.write_text("".join(json.dumps(dict(r)) + "\n" for r in rows), encoding="utf-8")
    else:
        with path.open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return path


def read_totals(path: str | Path) -> dict[str, int]:
    """Each class's number of evaluated samples, from a JSON object (``{"cat": 50, "dog": 48}``) or a
    CSV file with the columns ``class`` and ``total``; :class:`TableError` names the file and the entry.
    """
    path = Path(path)
    text = _read_text(path, f"--totals {path}")
    entries: list[tuple[str, Any, Any]] = []  # (where, class, size)
    if path.suffix.lower() == ".json":
        doc = parse_json(text, f"--totals {path}")
        if not isinstance(doc, dict) or not doc:
            raise TableError(f'--totals {path}: expected a JSON object of class sizes, like {{"cat": 50}}')
        entries = [(f"--totals {path}: class {k!r}", k, v) for k, v in doc.items()]
    else:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        columns = [c.strip() for c in reader.fieldnames or []]
        if "class" not in columns or "total" not in columns:
            raise TableError(
                f"--totals {path}: expected a CSV header with the columns class and total (or a JSON "
                "object of class sizes in a .json file)"
            )
        _check_header(columns, f"--totals {path}")
        try:
            for row in reader:
                if None in row:
                    raise TableError(
                        f"--totals {path}: row {reader.line_num}: more cells than header columns"
                    )
                clean = {k.strip(): v for k, v in row.items() if k is not None}
                entries.append((f"--totals {path}: row {reader.line_num}", clean["class"], clean["total"]))
        except csv.Error as exc:
            raise TableError(f"--totals {path}: row {reader.line_num}: {exc}") from None
        if not entries:
            raise TableError(f"--totals {path}: no rows")
    totals: dict[str, int] = {}
    for where, name, size in entries:
        name = str(name if name is not None else "").strip()
        if not name:
            raise TableError(f"{where}: empty class")
        if name in totals:
            raise TableError(f"{where}: class {name!r} given twice")
        totals[name] = _int(size, f"{where}, total", minimum=1)
    return totals


def import_table(
    path: str | Path,
    *,
    fmt: str | None = None,
    tasks: Sequence[Sequence[int | str]] | None = None,
    decimals: int | None = None,
    totals: Mapping[str, int] | int | None = None,
    on_ambiguous: AmbiguousPolicy = "refuse",
    scenario: ScenarioKind = "nc",
    groups: Sequence[str] | None = None,
    classes: Sequence[Sequence[int | str]] | None = None,
) -> EvaluationLog:
    """Read a CSV/JSON Lines per-class table and return the validated log (:class:`TableError` on bad
    input); ``decimals``, ``totals``, ``on_ambiguous``, ``scenario``, ``groups`` and ``classes`` as in
    :func:`log_from_rows`."""
    path = Path(path)
    rows = read_table(path, fmt=fmt)
    unknown = sorted({k for _, r in rows for k in r} - KNOWN - ({GROUP} if scenario != "nc" else set()))
    meta = {"ignored_columns": unknown} if unknown else {}
    try:
        return log_from_rows(
            rows,
            source=str(path),
            tasks=tasks,
            meta=meta,
            decimals=decimals,
            totals=totals,
            on_ambiguous=on_ambiguous,
            scenario=scenario,
            groups=groups,
            classes=classes,
        )
    except TableError as exc:  # an NC table with a group column: say what the column could mean
        if GROUP not in unknown:
            raise
        hint = f"(the table has a {GROUP!r} column: for a table of sample groups give --scenario ni or nic)"
        raise TableError(f"{exc}\n{hint}") from None
