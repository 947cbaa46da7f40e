"""Scenario: a class order split into tasks (NC), or tasks of sample groups (NI, NIC).

>>> build_tasks(6, n_tasks=3)
[[0, 1], [2, 3], [4, 5]]
>>> build_tasks(5, tasks=[[4], [0, 1, 2], [3]])
[[4], [0, 1, 2], [3]]
>>> build_tasks(4, n_tasks=2, class_order=[3, 2, 1, 0])
[[3, 2], [1, 0]]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from clgate.engine.errors import EngineInputError


def build_tasks(
    n_classes: int,
    *,
    n_tasks: int | None = None,
    tasks: list[list[int]] | None = None,
    class_order: list[int] | None = None,
    shuffle_seed: int | None = None,
) -> list[list[int]]:
    """Class groups in training order; every class ``0 … n_classes-1`` in exactly one task."""
    if tasks is not None:
        flat = [c for g in tasks for c in g]
        check_cover(flat, n_classes, "scenario.tasks")
        return [list(map(int, g)) for g in tasks]
    if class_order is not None:
        order = list(map(int, class_order))
        check_cover(order, n_classes, "scenario.class_order")
    elif shuffle_seed is not None:
        order = np.random.default_rng(shuffle_seed).permutation(n_classes).tolist()
    else:
        order = list(range(n_classes))
    assert n_tasks is not None
    if n_tasks > n_classes:
        raise EngineInputError(f"scenario.n_tasks: {n_tasks} tasks for only {n_classes} classes")
    if n_classes % n_tasks:
        raise EngineInputError(
            f"scenario.n_tasks: {n_classes} classes do not split into {n_tasks} equal tasks; "
            "give explicit class groups in scenario.tasks"
        )
    size = n_classes // n_tasks
    return [order[k * size : (k + 1) * size] for k in range(n_tasks)]


def check_cover(
    classes: list[int], n_classes: int, where: str, *, of: str = "the data", once: bool = True
) -> None:
    """``classes`` (the tasks' classes, flattened) are ids of the ``n_classes`` of ``of``, each of those
    is in some task, and (``once``: NC) none is in two; else an error naming ``where``."""
    out_of_range = sorted({c for c in classes if c >= n_classes})
    if out_of_range:
        raise EngineInputError(
            f"{where}: class id(s) {out_of_range} out of range ({of} has {n_classes} classes)"
        )
    if once and len(set(classes)) != len(classes):
        raise EngineInputError(f"{where}: a class appears more than once")
    missing = sorted(set(range(n_classes)) - set(classes))
    if missing:
        raise EngineInputError(
            f"{where}: class id(s) {missing} are in no task (every class of {of} must be in one)"
        )


def tasks_from_spec(scenario: Any, n_classes: int) -> list[list[int]]:
    """:func:`build_tasks` from a ``clgate.schemas.job.ScenarioSpec``."""
    return build_tasks(
        n_classes,
        n_tasks=scenario.n_tasks,
        tasks=scenario.tasks,
        class_order=scenario.class_order,
        shuffle_seed=scenario.shuffle_seed,
    )


# ---------------------------------------------------------------------- sample-group scenarios (NI, NIC)
@dataclass(frozen=True)
class Scenario:
    """A job's tasks on both sides of the trust boundary.

    ``classes``: the classes each task trains on (what the child is told). ``cells``: the ids the log's
    ``tasks`` list — classes in an NC scenario, cells (task k, class c) in NI/NIC, numbered in task
    order — with ``class_of`` the class of each cell and ``groups`` the name of each task's sample group.
    ``train_task``: each training sample's task (``-1``: none; ``None`` in NC, where a sample's label
    says its task). ``test_cell``: each test sample's cell (``-1``: in no task) — it stays on the
    trusted side.
    """

    kind: str
    classes: list[list[int]]
    cells: list[list[int]]
    test_cell: np.ndarray
    class_of: list[int] | None = None
    groups: list[str] | None = None
    train_task: np.ndarray | None = None

    @property
    def n_cells(self) -> int:
        return sum(len(t) for t in self.cells)

    def log_fields(self) -> dict[str, Any]:
        """The evaluation log's scenario fields (none for NC: its log is the spec's as it always was)."""
        if self.kind == "nc":
            return {}
        return {"scenario": self.kind, "class_of": self.class_of, "groups": self.groups}


def scenario_from_spec(scenario: Any, data: Any) -> Scenario:
    """The :class:`Scenario` of a ``clgate.schemas.job.ScenarioSpec`` on a loaded data set.

    >>> from clgate.engine.data import load_digits, shift_digits
    >>> from clgate.schemas.job import ScenarioSpec
    >>> data = shift_digits(load_digits(), type="brightness", groups=2)
    >>> s = scenario_from_spec(ScenarioSpec(type="nic", groups=["bright75", "bright100"],
    ...                                     classes=[[0, 1, 2], [2, 3, 4, 5, 6, 7, 8, 9]]), data)
    >>> s.cells[1][:3], s.class_of[:5], s.groups
    ([3, 4, 5], [0, 1, 2, 2, 3], ['bright75', 'bright100'])
    """
    if scenario.type == "nc":
        tasks = tasks_from_spec(scenario, data.n_classes)
        return Scenario("nc", tasks, tasks, np.asarray(data.y_test, dtype=np.int64))
    group_train, group_test, names = _groups_of(scenario, data)
    order = list(scenario.groups) if scenario.groups is not None else list(names)
    if scenario.type == "ni" and scenario.n_tasks is not None and scenario.n_tasks != len(order):
        raise EngineInputError(
            f"scenario.n_tasks: {scenario.n_tasks} tasks but the data has {len(order)} sample groups "
            f"({_listed(order)}); name the groups to use in scenario.groups"
        )
    index = {name: g for g, name in enumerate(names)}
    if len(index) != len(names):  # two groups of one name would silently become one (the last)
        raise EngineInputError(f"data: two sample groups have the same name ({_listed(names)})")
    unknown = [g for g in order if g not in index]
    if unknown:
        raise EngineInputError(
            f"scenario.groups: no sample group {unknown[0]!r} in the data (its groups: {_listed(names)})"
        )
    if scenario.type == "ni":
        task_classes = [list(range(data.n_classes)) for _ in order]
    else:
        task_classes = [list(map(int, c)) for c in scenario.classes]
        check_cover([c for t in task_classes for c in t], data.n_classes, "scenario.classes", once=False)
    return _cells(scenario.type, order, task_classes, index, group_train, group_test, data)


def _listed(names: list[str], most: int = 8) -> str:
    """``names`` for a message, the first ``most`` of them when there are more (data may hold thousands).

    >>> _listed(["a", "b"]), _listed([str(g) for g in range(100)], most=3)
    ('a, b', '0, 1, 2, … (100 in all)')
    """
    shown = ", ".join(names[:most])
    return shown if len(names) <= most else f"{shown}, … ({len(names)} in all)"


def _cells(
    kind: str,
    order: list[str],
    task_classes: list[list[int]],
    index: dict[str, int],
    group_train: np.ndarray,
    group_test: np.ndarray,
    data: Any,
) -> Scenario:
    y_train, y_test = np.asarray(data.y_train), np.asarray(data.y_test)
    train_task = np.full(len(y_train), -1, dtype=np.int64)
    test_cell = np.full(len(y_test), -1, dtype=np.int64)
    cells: list[list[int]] = []
    class_of: list[int] = []
    for k, (name, classes) in enumerate(zip(order, task_classes, strict=True)):
        g = index[name]
        ids = []
        for c in classes:
            in_train = (group_train == g) & (y_train == c)
            in_test = (group_test == g) & (y_test == c)
            label = data.class_names[c]
            if not in_train.any():
                raise EngineInputError(
                    f"scenario: task {k + 1} (group {name!r}) has no training sample of class {label!r}"
                )
            if not in_test.any():
                raise EngineInputError(
                    f"scenario: task {k + 1} (group {name!r}) has no test sample of class {label!r} "
                    "(every cell needs held-out samples)"
                )
            train_task[in_train] = k
            test_cell[in_test] = len(class_of)
            ids.append(len(class_of))
            class_of.append(c)
        cells.append(ids)
    return Scenario(kind, task_classes, cells, test_cell, class_of, list(order), train_task)


def _groups_of(scenario: Any, data: Any) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Each sample's group id and the groups' names: from ``scenario.samples``, else from the data."""
    if scenario.samples is None:
        if not data.has_groups:
            raise EngineInputError(
                f"scenario.type: {scenario.type} needs sample groups and the data has none: an NPZ file "
                "with group_train and group_test, an image folder with grouped: true, digits with a "
                "shift, or scenario.samples"
            )
        return data.group_train, data.group_test, list(data.group_names)
    names = list(scenario.samples)
    splits = {"train": len(data.y_train), "test": len(data.y_test)}
    out = {split: np.full(n, -1, dtype=np.int64) for split, n in splits.items()}
    for g, name in enumerate(names):
        for split, n in splits.items():
            listed = getattr(scenario.samples[name], split)
            where = f"scenario.samples.{name}.{split}"
            if listed and max(listed) >= n:  # checked as Python ints: 10**20 would overflow an int64
                raise EngineInputError(
                    f"{where}: position {max(listed)} beyond the {split} set's {n} samples"
                )
            rows = np.asarray(listed, dtype=np.int64)
            taken = rows[out[split][rows] >= 0]
            if len(taken):
                other = names[int(out[split][taken[0]])]
                raise EngineInputError(f"{where}: sample {int(taken[0])} is already in group {other!r}")
            out[split][rows] = g
    return out["train"], out["test"], names
