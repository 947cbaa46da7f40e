"""Scenario: a class order split into tasks.

>>> build_tasks(6, n_tasks=3)
[[0, 1], [2, 3], [4, 5]]
>>> build_tasks(5, tasks=[[4], [0, 1, 2], [3]])
[[4], [0, 1, 2], [3]]
>>> build_tasks(4, n_tasks=2, class_order=[3, 2, 1, 0])
[[3, 2], [1, 0]]
"""

from __future__ import annotations

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
        _check_cover(flat, n_classes, "scenario.tasks")
        return [list(map(int, g)) for g in tasks]
    if class_order is not None:
        order = list(map(int, class_order))
        _check_cover(order, n_classes, "scenario.class_order")
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


def _check_cover(classes: list[int], n_classes: int, where: str) -> None:
    out_of_range = sorted(c for c in classes if c >= n_classes)
    if out_of_range:
        raise EngineInputError(
            f"{where}: class id(s) {out_of_range} out of range (the data has {n_classes} classes)"
        )
    if len(set(classes)) != len(classes):
        raise EngineInputError(f"{where}: a class appears more than once")
    missing = sorted(set(range(n_classes)) - set(classes))
    if missing:
        raise EngineInputError(
            f"{where}: class id(s) {missing} are in no task (every class of the data must be in one)"
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
