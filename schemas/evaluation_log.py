"""`clgate.evaluation-log/v1`: what continual evaluation produces and every metric consumes.

The words are in ``docs/evaluation-log.md``; this module is the same contract in code.
Every rule of the spec is checked here, and every error names the field and the point, e.g.
``points[12].correct[3]: correct (7) exceeds total (5)``.

Checks run over whole lists with builtins (``map``, ``min``) so that a log with tens of thousands of
points and hundreds of classes validates in about the time it takes to parse it.

Extension beyond the spec: ``partial: true`` marks a log cut short (Ctrl-C, a failed job). In such a
log the tasks after the last finished one may have no ``task_end`` point; metrics treat them as not
reached (``null``). A complete log (the default) must have a task end for every task.
``diverged: {task, iteration, reason}`` (with ``partial: true``) marks a run whose training stopped on a
non-finite loss or weights; the gate never passes it.

Scenarios: ``scenario: nc`` (new classes, the default, left out of the file) is the spec's log.
``scenario: ni`` (new instances) and ``nic`` (new instances and classes) logs are the same contract over
**cells**: a cell is (task k, class c), the held-out samples of class c in task k's sample group;
``class_of`` maps each cell id to its class, ``tasks`` list cell ids, counts are per cell, and
``groups`` optionally names each task's sample group. NC logs serialise exactly as before.

>>> log = EvaluationLog.parse({"scenario": "ni", "class_of": [0, 1, 0, 1], "class_names": ["cat", "dog"],
...     "groups": ["day", "night"], "tasks": [[0, 1], [2, 3]], "points": [
...     {"iteration": 5, "task": 1, "task_end": True, "correct": [4, 3, 0, 0], "total": [4, 4, 0, 0]},
...     {"iteration": 9, "task": 2, "task_end": True, "correct": [3, 4, 2, 3], "total": [4, 4, 4, 4]}]})
>>> log.n_classes, log.n_real_classes, log.cell_names()
(4, 2, ['cat @ day', 'dog @ day', 'cat @ night', 'dog @ night'])
"""

from __future__ import annotations

import json
import math
import operator
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from clgate.schemas.errors import InputError, loc_to_path, problems_of

__all__ = ["FORMAT", "EvalPoint", "EvaluationLog", "EvaluationLogError", "TaskResources", "loc_to_path"]

FORMAT: Final = "clgate.evaluation-log/v1"
MAX_REPORTED_PROBLEMS = 20
MAX_COUNT: Final = 2**53
"""The largest count a point may hold (and the largest iteration, task or size ``clgate import`` takes):
metrics compute in floats, which hold every whole number up to 2**53 (a larger one is no real held-out
set, and would not convert, or convert inexactly)."""


class EvaluationLogError(InputError):
    """A log that breaks the contract; ``problems`` lists one ``path: reason`` line each."""

    what = "evaluation log"


class EvalPoint(BaseModel):
    """One evaluation of the model on the held-out classes."""

    model_config = ConfigDict(extra="forbid")

    iteration: Annotated[int, Field(ge=0, description="Training updates done when evaluated.")]
    task: Annotated[int, Field(ge=1, description="1-based index of the task being trained.")]
    task_end: bool = Field(False, description="True for the evaluation right after the task's last update.")
    correct: list[int] | None = Field(None, description="Correct predictions per class (length C).")
    total: list[int] | None = Field(None, description="Evaluated samples per class; 0 = not evaluated.")
    accuracy: list[float | None] | None = Field(
        None, description="Per-class accuracy in [0, 1] or null, when only rates are known."
    )

    @property
    def has_counts(self) -> bool:
        return self.correct is not None

    def evaluated(self) -> list[bool]:
        """Which classes were evaluated at this point."""
        if self.total is not None:
            return [t > 0 for t in self.total]
        assert self.accuracy is not None
        return [a is not None for a in self.accuracy]


class TaskResources(BaseModel):
    """Resources spent on one task, for the Díaz-Rodríguez efficiency criteria (ms, sss, ce)."""

    model_config = ConfigDict(extra="forbid")

    task: Annotated[int, Field(ge=1)]
    model_params: Annotated[int, Field(gt=0, description="Parameters after learning the task.")]
    buffer_bytes: Annotated[int, Field(ge=0, description="Replay-memory bytes after the task.")]
    train_bytes: Annotated[int, Field(ge=0, description="Bytes of the task's training set.")]
    ops_train: Annotated[float, Field(ge=0, allow_inf_nan=False, description="Mul-adds to learn the task.")]
    ops_pass: Annotated[
        float,
        Field(
            ge=0,
            allow_inf_nan=False,
            description="Mul-adds of one forward+backward pass over the task's training set.",
        ),
    ]


class Divergence(BaseModel):
    """Where training stopped because the loss or the weights stopped being finite (clgate extension)."""

    model_config = ConfigDict(extra="forbid")

    task: Annotated[int, Field(ge=1, description="1-based task being trained when it diverged.")]
    iteration: Annotated[
        int, Field(ge=0, description="The update (1-based count) whose result was not finite.")
    ]
    reason: str = Field(description="What was not finite, e.g. 'loss is nan'.")


class EvaluationLog(BaseModel):
    """A whole continual-evaluation run: task split, evaluation points, resources, provenance."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["clgate.evaluation-log/v1"] = FORMAT
    # NC logs are written exactly as before these fields existed (hashes stay the same): left out at "nc"/null
    scenario: Literal["nc", "ni", "nic"] = Field(
        "nc",
        exclude_if=lambda value: value == "nc",
        description="nc: tasks bring new classes (ids in tasks are classes); ni: new instances of the same "
        "classes; nic: both. In ni/nic logs, ids in tasks and positions in counts are cells (see class_of).",
    )
    class_of: list[Annotated[int, Field(ge=0)]] | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description="ni/nic only: the class id (0 … C-1) of each cell id (position); a cell is the held-out "
        "samples of one class in one task's sample group.",
    )
    groups: list[str] | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description="ni/nic only: the name of the sample group each task brings (one per task).",
    )
    class_names: list[str] | None = None
    tasks: list[list[int]]
    points: list[EvalPoint]
    resources: list[TaskResources] | None = None
    meta: dict[str, Any] = Field(default_factory=dict)
    partial: bool = Field(False, description="True when the run was cut short (clgate extension).")
    diverged: Divergence | None = Field(
        None, description="Set when training stopped on a non-finite loss or weights (implies partial)."
    )

    # ------------------------------------------------------------------ derived, cheap
    @property
    def n_classes(self) -> int:
        """Number of ids in ``tasks``: classes in an NC log, cells in an NI/NIC log (the counts' length)."""
        return sum(len(t) for t in self.tasks)

    @property
    def n_real_classes(self) -> int:
        """Number of distinct classes ``C`` (``n_classes`` in an NC log)."""
        return self.n_classes if self.class_of is None else len(set(self.class_of))

    def classes_of_cells(self) -> list[int]:
        """The class of every id in ``tasks`` (the identity in an NC log)."""
        return list(range(self.n_classes)) if self.class_of is None else list(self.class_of)

    def task_of_cells(self) -> list[int]:
        """The 0-based task of every id in ``tasks``."""
        out = [0] * self.n_classes
        for k, ids in enumerate(self.tasks):
            for c in ids:
                out[c] = k
        return out

    def group_label(self, k: int) -> str:
        """Task ``k``'s (0-based) sample group: its name in ``groups``, else ``task k+1``."""
        return self.groups[k] if self.groups else f"task {k + 1}"

    def cell_names(self) -> list[str]:
        """The name of every id in ``tasks``: the class name in an NC log, ``"<class> @ <group>"`` in an
        NI/NIC log (``<group>`` is the group's name, or ``task k`` without ``groups``)."""
        if self.class_of is None:
            return [self.class_label(c) for c in range(self.n_classes)]
        task = self.task_of_cells()
        names = self.class_names
        return [
            f"{names[c] if names else c} @ {self.group_label(k)}"
            for c, k in zip(self.class_of, task, strict=True)
        ]

    @property
    def n_tasks(self) -> int:
        return len(self.tasks)

    def class_label(self, c: int) -> str:
        return self.class_names[c] if self.class_names else str(c)

    def task_end_indices(self) -> list[int]:
        """Point index of each finished task's end, in task order."""
        return [i for i, p in enumerate(self.points) if p.task_end]

    @property
    def finished_tasks(self) -> int:
        return sum(1 for p in self.points if p.task_end)

    # ------------------------------------------------------------------ validation
    @model_validator(mode="after")
    def _check_contract(self) -> EvaluationLog:
        problems = _Problems()
        n_classes = self._check_tasks(problems)
        if n_classes is not None:
            self._check_points(problems, n_classes)
        self._check_resources(problems)
        if self.diverged is not None and not self.partial:
            problems.add("diverged: a diverged run stopped early; the log must have partial: true")
        if problems:
            raise ValueError(problems.text())
        return self

    def _check_tasks(self, problems: _Problems) -> int | None:
        cells = self.class_of is not None
        if not self.tasks:
            problems.add("tasks: at least one task is required")
            return None
        seen: dict[int, int] = {}
        for k, classes in enumerate(self.tasks):
            if not classes:
                problems.add(f"tasks[{k}]: a task must hold at least one class")
            for c in classes:
                if c < 0:
                    problems.add(f"tasks[{k}]: class id {c} is negative")
                elif c in seen:
                    problems.add(
                        f"tasks[{k}]: class {c} already belongs to tasks[{seen[c]}] (tasks must be disjoint)"
                    )
                else:
                    seen[c] = k
        n_classes = len(seen)
        word = "cell" if cells else "class"
        missing = sorted(set(range(n_classes)) - set(seen))
        if missing:
            problems.add(f"tasks: {word} ids must be 0 … {n_classes - 1}; missing {_short(missing)}")
        n_real = (
            self._check_cells(problems, n_classes)
            if not problems
            else (len(set(self.class_of)) if self.class_of else n_classes)
        )
        if self.class_names is not None:
            if len(self.class_names) != n_real:
                problems.add(f"class_names: {len(self.class_names)} names for {n_real} classes in tasks")
            duplicates = sorted({n for n in self.class_names if self.class_names.count(n) > 1})
            if duplicates:
                problems.add(f"class_names: duplicate names {_short(duplicates)}")
        return None if problems else n_classes

    def _check_cells(self, problems: _Problems, n_cells: int) -> int:
        """The scenario fields' rules (NI/NIC: ``class_of``, ``groups``); returns the number of classes."""
        if self.scenario == "nc":
            for name in ("class_of", "groups"):
                if getattr(self, name) is not None:
                    problems.add(f"{name}: only for scenario ni or nic (this log's scenario is nc)")
            return n_cells
        class_of = self.class_of
        if class_of is None:
            problems.add(
                f"class_of: required when scenario is {self.scenario} (the class of each cell id in tasks)"
            )
            return n_cells
        if len(class_of) != n_cells:
            problems.add(f"class_of: {len(class_of)} entries for {n_cells} cells in tasks (one per cell)")
            return n_cells
        n_real = len(self.class_names) if self.class_names is not None else max(class_of) + 1
        out_of_range = sorted({c for c in class_of if c >= n_real})
        if out_of_range:
            problems.add(
                f"class_of: class id(s) {_short(out_of_range)} out of range (C = {n_real} classes, "
                f"ids 0 … {n_real - 1})"
            )
        absent = sorted(set(range(n_real)) - set(class_of))
        if absent:
            problems.add(f"class_of: class id(s) {_short(absent)} belong to no cell (every class needs one)")
        self._check_cell_classes(problems, class_of, n_real)
        if self.groups is not None:
            self._check_groups(problems, class_of, self.groups)
        return n_real

    def _check_cell_classes(self, problems: _Problems, class_of: list[int], n_real: int) -> None:
        """One cell per class in a task; in NI, a first task that brings every class."""
        for k, ids in enumerate(self.tasks):
            first: dict[int, int] = {}
            for cell in ids:
                c = class_of[cell]
                if c in first:
                    problems.add(
                        f"tasks[{k}]: cells {first[c]} and {cell} both map to class {c} in class_of "
                        "(a task has at most one cell per class)"
                    )
                    break
                first[c] = cell
        if self.scenario == "ni" and not problems:
            brought = {class_of[cell] for cell in self.tasks[0]}
            lacking = sorted(set(range(n_real)) - brought)
            if lacking:
                problems.add(
                    f"tasks[0]: scenario ni: the first task brings every class; "
                    f"class id(s) {_short(lacking)} "
                    "are missing (use scenario nic when tasks also bring new classes)"
                )

    def _check_groups(self, problems: _Problems, class_of: list[int], groups: list[str]) -> None:
        """One name per task, and a group's class in one cell only."""
        if len(groups) != len(self.tasks):
            problems.add(f"groups: {len(groups)} names for {len(self.tasks)} tasks (one per task)")
            return
        owner: dict[tuple[str, int], int] = {}
        for k, ids in enumerate(self.tasks):
            for cell in ids:
                key = (groups[k], class_of[cell])
                if key in owner:
                    problems.add(
                        f"groups: cells {owner[key]} and {cell} are both class {key[1]} of group "
                        f"{key[0]!r} (a group's class is one cell)"
                    )
                owner.setdefault(key, cell)

    def _check_points(self, problems: _Problems, n_classes: int) -> None:
        n_tasks = len(self.tasks)
        task_end_of: dict[int, int] = {}
        previous_iteration = -1
        previous_task = 1
        for i, p in enumerate(self.points):
            where = f"points[{i}]"
            if p.iteration <= previous_iteration:
                problems.add(
                    f"{where}.iteration: {p.iteration} is not after the previous point's "
                    f"{previous_iteration} (iterations must strictly increase)"
                )
            previous_iteration = max(previous_iteration, p.iteration)
            if p.task > n_tasks:
                problems.add(f"{where}.task: task {p.task} does not exist (the log has {n_tasks} tasks)")
            if p.task < previous_task:
                problems.add(f"{where}.task: goes backwards from task {previous_task} to task {p.task}")
            elif p.task > previous_task and previous_task not in task_end_of:
                problems.add(
                    f"{where}.task: task {previous_task} ended without a task_end point "
                    f"(its last point must have task_end: true)"
                )
            if p.task >= previous_task and p.task in task_end_of and not p.task_end:
                problems.add(
                    f"{where}.task_end: points[{task_end_of[p.task]}] already ended task {p.task}; "
                    "the task_end point must be the last point of its task"
                )
            if p.task_end:
                if p.task in task_end_of:
                    problems.add(
                        f"{where}.task_end: task {p.task} already has a task_end point at "
                        f"points[{task_end_of[p.task]}] (exactly one per task)"
                    )
                else:
                    task_end_of[p.task] = i
            previous_task = max(previous_task, p.task)
            self._check_point_values(problems, where, p, n_classes)
            if p.task_end and p.task <= n_tasks:
                evaluated = p.evaluated() if _lengths_ok(p, n_classes) else None
                if evaluated is not None:
                    missing = [c for k in range(p.task) for c in self.tasks[k] if not evaluated[c]]
                    if missing:
                        problems.add(
                            f"{where}: task-end point of task {p.task} does not evaluate class(es) "
                            f"{_short(missing)} of tasks 1 … {p.task}"
                        )
        finished = set(task_end_of)
        unfinished = [k for k in range(1, n_tasks + 1) if k not in finished]
        if unfinished and not self.partial:
            problems.add(
                f"points: task(s) {_short(unfinished)} have no task_end point (every task needs exactly one; "
                "set partial: true for a run that was cut short)"
            )
        elif unfinished and finished and min(unfinished) < max(finished):
            problems.add(f"points: task(s) {_short(unfinished)} have no task_end point but later tasks do")

    @staticmethod
    def _check_point_values(problems: _Problems, where: str, p: EvalPoint, n_classes: int) -> None:
        if (p.correct is None) != (p.total is None):
            problems.add(f"{where}: correct and total must be given together")
            return
        if p.correct is None and p.accuracy is None:
            problems.add(f"{where}: a point needs correct/total counts or accuracy")
            return
        if p.correct is not None and p.accuracy is not None:
            problems.add(f"{where}: give either correct/total counts or accuracy, not both")
            return
        for name in ("correct", "total", "accuracy"):
            values = getattr(p, name)
            if values is not None and len(values) != n_classes:
                problems.add(f"{where}.{name}: has {len(values)} entries, expected C = {n_classes}")
                return
        if p.correct is not None and p.total is not None:
            for name, values in (("correct", p.correct), ("total", p.total)):
                if values and min(values) < 0:
                    c = next(c for c, v in enumerate(values) if v < 0)
                    problems.add(f"{where}.{name}[{c}]: count ({values[c]}) is negative")
                    return
                if values and max(values) > MAX_COUNT:
                    c = next(c for c, v in enumerate(values) if v > MAX_COUNT)
                    problems.add(f"{where}.{name}[{c}]: count ({values[c]:.3g}) is above 2**53")
                    return
            if any(map(operator.gt, p.correct, p.total)):
                c = next(c for c, (a, b) in enumerate(zip(p.correct, p.total, strict=True)) if a > b)
                problems.add(f"{where}.correct[{c}]: correct ({p.correct[c]}) exceeds total ({p.total[c]})")
        if p.accuracy is not None:
            for c, a in enumerate(p.accuracy):
                if a is not None and not (0.0 <= a <= 1.0):  # NaN fails both comparisons
                    shown = "NaN" if math.isnan(a) else repr(a)
                    problems.add(f"{where}.accuracy[{c}]: {shown} is not a fraction in [0, 1]")
                    return

    def _check_resources(self, problems: _Problems) -> None:
        if self.resources is None:
            return
        finished = sum(1 for p in self.points if p.task_end)
        expected = len(self.tasks) if not self.partial else finished
        if len(self.resources) != expected and not (self.partial and len(self.resources) >= finished):
            problems.add(f"resources: {len(self.resources)} entries, expected one per task ({expected})")
        for k, r in enumerate(self.resources):
            if r.task != k + 1:
                problems.add(
                    f"resources[{k}].task: is {r.task}, expected {k + 1} (one entry per task, in order)"
                )

    # ------------------------------------------------------------------ text forms
    @classmethod
    def parse(cls, data: str | bytes | dict[str, Any], source: str | None = None) -> EvaluationLog:
        """Validate a log given as JSON text or a dict; raises :class:`EvaluationLogError`."""
        try:
            if isinstance(data, dict):
                return cls.model_validate(data)
            return cls.model_validate_json(data)
        except ValidationError as exc:
            raise EvaluationLogError(problems_of(exc), source) from None

    @classmethod
    def from_jsonl(cls, text: str) -> EvaluationLog:
        """The log from its JSON Lines text (a header object, then one point a line); files are read by
        :func:`clgate.documents.load_log`."""
        lines = [line for line in text.splitlines() if line.strip()]
        if not lines:
            raise ValueError("empty JSON Lines log: the first line must be the header object")
        try:
            header = json.loads(lines[0])
            points = [json.loads(line) for line in lines[1:]]
        except json.JSONDecodeError as exc:
            raise ValueError(f"invalid JSON Lines: {exc}") from None
        if not isinstance(header, dict):
            raise ValueError("JSON Lines header (line 1) must be an object")
        return cls.model_validate({**header, "points": header.get("points", []) + points})

    def to_jsonl(self) -> str:
        """The JSON Lines text of the log (written to a file by :func:`clgate.documents.dump_log`)."""
        header = self.model_dump(mode="json", exclude={"points"}, exclude_none=True)
        lines = [json.dumps(header)]
        lines += [p.model_dump_json(exclude_none=True) for p in self.points]
        return "\n".join(lines) + "\n"


class _Problems:
    def __init__(self) -> None:
        self.items: list[str] = []
        self.dropped = 0

    def add(self, text: str) -> None:
        if len(self.items) < MAX_REPORTED_PROBLEMS:
            self.items.append(text)
        else:
            self.dropped += 1

    def __bool__(self) -> bool:
        return bool(self.items)

    def text(self) -> str:
        extra = [f"… and {self.dropped} more problem(s)"] if self.dropped else []
        return "\n".join(self.items + extra)


def _lengths_ok(p: EvalPoint, n_classes: int) -> bool:
    values = p.total if p.total is not None else p.accuracy
    return values is not None and len(values) == n_classes


def _short(values: list[Any], limit: int = 8) -> str:
    shown = ", ".join(str(v) for v in values[:limit])
    return shown + (f", … ({len(values)} in all)" if len(values) > limit else "")
