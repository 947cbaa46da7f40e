"""The runner: :func:`run_job` runs a job, one ``clgate.evaluation-log/v1`` per seed.

The job is split across a trust boundary. The submitted model is loaded, trained and asked for
predictions in a child process (:mod:`clgate.engine.child`, :mod:`clgate.engine.training`) that receives
the training samples and the held-out *inputs*, never the held-out labels. This process — the trusted
side (:mod:`clgate.engine.trusted`) — holds the labels, counts per class from the child's predictions
and writes the log. ``launcher`` says how the child starts: a plain subprocess by default;
:mod:`clgate.workers.sandbox` passes one that wraps it in bubblewrap with resource limits.

Iterations count optimizer updates. A point is written every ``eval_every`` updates, at every task
end (``task_end: true``) and, with ``before_first_update``, at iteration 0. With
``first_task_learned`` the first task is not trained: its task-end point is at iteration 0.

Stopping: ``should_stop`` is polled while the child runs (every 0.1 s); when it returns true the child
is asked to stop (it checks after every update) and killed ``stop_grace_s`` later if it has not. The log
so far is written as a valid partial log (``partial: true``) and :class:`JobCancelled` is raised,
carrying the paths of every log written (complete logs of finished seeds, then the partial one). On
``KeyboardInterrupt`` the partial log is written the same way and the ``KeyboardInterrupt`` is
re-raised (its ``paths`` attribute set). The log file is also rewritten (partial) at every task end,
so a killed process leaves its finished tasks behind.
"""

from __future__ import annotations

from clgate.engine.schedule import batch_plan, plan_checkpoints, resolve_device
from clgate.engine.trusted import (
    ChildError,
    ChildLaunch,
    JobCancelled,
    Launcher,
    Progress,
    TrainingDiverged,
    local_launcher,
    run_job,
)

__all__ = [
    "ChildError",
    "ChildLaunch",
    "JobCancelled",
    "Launcher",
    "Progress",
    "TrainingDiverged",
    "batch_plan",
    "local_launcher",
    "plan_checkpoints",
    "resolve_device",
    "run_job",
]
