"""When a job's model is updated and evaluated: the device, the batches of each update, the checkpoints.

Shared by the child (:mod:`clgate.engine.training`), which follows the plan, and the trusted side
(:mod:`clgate.engine.trusted`), which checks that the points it receives are the ones the plan makes.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from clgate.engine.errors import EngineInputError
from clgate.schemas.job import JobSpec


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise EngineInputError(f"device: {name!r} requested but CUDA is not available on this machine")
    if name == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise EngineInputError("device: 'mps' requested but it is not available on this machine")
    return torch.device(name)


def batch_plan(
    n: int, batch_size: int, steps_per_epoch: int, n_iter: int, generator: torch.Generator
) -> Iterator[torch.Tensor]:
    """The positions of each of ``n_iter`` updates over ``n`` samples: a fresh permutation per epoch of
    ``steps_per_epoch`` batches (drawn from ``generator`` when the epoch starts); the last batch of an
    epoch takes its remainder (one sample more than a batch when a lone sample would be left for a
    BatchNorm model, see ``SeedRun._steps_per_epoch`` in :mod:`clgate.engine.training`).

    >>> [p.tolist() for p in batch_plan(5, 2, 2, 3, torch.Generator().manual_seed(0))]
    [[4, 0], [1, 3, 2], [3, 4]]
    """
    perm = torch.empty(0, dtype=torch.long)
    for it in range(n_iter):
        pos = it % steps_per_epoch
        if pos == 0:
            perm = torch.randperm(n, generator=generator)
        last = pos == steps_per_epoch - 1
        yield perm[pos * batch_size :] if last else perm[pos * batch_size : (pos + 1) * batch_size]


def plan_checkpoints(spec: JobSpec, n_tasks: int) -> list[tuple[str, int, int, bool]]:
    """``(path, iteration, task, task_end)`` for each checkpoint of an evaluate-mode job.

    Without iterations there must be one checkpoint per task end (iteration = task number). With
    iterations (all of them), each checkpoint's task is given (``PATH@ITERATION:TASK``) or, with one
    checkpoint per task, implied; the last checkpoint of each task is its task end.
    """
    cks = spec.checkpoints or []
    with_iter = [c.iteration is not None for c in cks]
    if not any(with_iter):
        if len(cks) != n_tasks:
            raise EngineInputError(
                f"checkpoints: {len(cks)} given for {n_tasks} tasks; give one per task end, "
                "or more with their iterations (PATH@ITERATION:TASK)"
            )
        return [(c.path, k + 1, k + 1, True) for k, c in enumerate(cks)]
    if not all(with_iter):
        raise EngineInputError(
            "checkpoints: give an iteration for every checkpoint (PATH@ITERATION) or for none"
        )
    given = [c.task for c in cks]
    if any(t is None for t in given):
        if len(cks) != n_tasks or any(t is not None for t in given):
            raise EngineInputError(
                "checkpoints: with more checkpoints than tasks, give each one's task (PATH@ITERATION:TASK)"
            )
        tasks = list(range(1, n_tasks + 1))
    else:
        tasks = [int(t) for t in given if t is not None]
    iterations = [int(c.iteration) for c in cks if c.iteration is not None]
    for i in range(1, len(cks)):
        if iterations[i] <= iterations[i - 1]:
            raise EngineInputError(
                f"checkpoints[{i}]: iteration {iterations[i]} is not after {iterations[i - 1]}"
            )
        if tasks[i] < tasks[i - 1]:
            raise EngineInputError(f"checkpoints[{i}]: task {tasks[i]} comes after task {tasks[i - 1]}")
    missing = sorted(set(range(1, n_tasks + 1)) - set(tasks))
    if missing:
        raise EngineInputError(
            f"checkpoints: no checkpoint for task(s) {missing} (each task needs its task-end checkpoint)"
        )
    if max(tasks) > n_tasks:
        raise EngineInputError(f"checkpoints: task {max(tasks)} does not exist ({n_tasks} tasks)")
    last = {t: i for i, t in enumerate(tasks)}
    return [(c.path, iterations[i], tasks[i], last[tasks[i]] == i) for i, c in enumerate(cks)]
