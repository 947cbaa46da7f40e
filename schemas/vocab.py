"""clgate's words, defined once: verdicts, job modes, queues, job states and key roles.

Every layer (schemas, the gate, the record store, the workers, the API) imports these instead of
spelling the strings again, so that a new mode or state is one edit here.

>>> exit_code("WARN"), exit_code("WARN", fail_on_warn=True), exit_code("FAIL"), exit_code("ERROR")
(0, 1, 1, 2)
>>> queue_for("retrain"), queue_for("regate")
('gpu', 'cpu')
>>> JobState("failed").terminal, JobState.running.terminal
(True, False)
>>> Role["approver"] >= Role.submitter, Role.global_admin > Role.admin, ROLES[-1]
(True, True, 'global_admin')
"""

from __future__ import annotations

import enum
from typing import Literal, get_args

__all__ = [
    "ENGINE_MODES",
    "JOB_MODES",
    "JOB_STATES",
    "QUEUES",
    "ROLES",
    "TERMINAL_STATES",
    "VERDICTS",
    "EngineMode",
    "JobMode",
    "JobState",
    "JobStateName",
    "Queue",
    "Role",
    "RoleName",
    "Verdict",
    "exit_code",
    "queue_for",
]

# ---------------------------------------------------------------------------------------------- verdicts
Verdict = Literal["PASS", "WARN", "FAIL", "ERROR"]
"""The gate's answer. Precedence: ERROR (a rule could not be evaluated, or the inputs were invalid) over
FAIL (a ``block`` rule failed) over WARN (a ``warn`` rule failed) over PASS."""
VERDICTS: tuple[Verdict, ...] = get_args(Verdict)


def exit_code(verdict: Verdict | str, *, fail_on_warn: bool = False) -> int:
    """The exit status of a gate with this verdict: 0 PASS (WARN too unless ``fail_on_warn``), 1 FAIL,
    2 ERROR (the same status as any other invalid input)."""
    if verdict == "WARN":
        return 1 if fail_on_warn else 0
    return {"PASS": 0, "FAIL": 1, "ERROR": 2}[verdict]


# ---------------------------------------------------------------------------------------------- job modes
JobMode = Literal["retrain", "evaluate", "metrics", "regate"]
"""What a service job does: train and evaluate a model (retrain), evaluate a trained model (evaluate),
compute metrics and gate uploaded logs (metrics), or gate a finished job again under a policy (regate)."""
JOB_MODES: tuple[JobMode, ...] = get_args(JobMode)

EngineMode = Literal["retrain", "evaluate"]
"""The modes that run the engine (torch) and therefore the ``gpu`` queue; also the modes of a job spec."""
ENGINE_MODES: tuple[EngineMode, ...] = get_args(EngineMode)

# ---------------------------------------------------------------------------------------------- queues
Queue = Literal["gpu", "cpu"]
"""Worker queues: ``gpu`` for the engine's modes, ``cpu`` for metrics and re-gating."""
QUEUES: tuple[Queue, ...] = get_args(Queue)


def queue_for(mode: JobMode | str) -> Queue:
    """``gpu`` for retrain/evaluate, ``cpu`` for metrics-only and re-gating."""
    return "gpu" if mode in ENGINE_MODES else "cpu"


# ---------------------------------------------------------------------------------------------- job states
JobStateName = Literal["queued", "running", "succeeded", "failed", "cancelled"]
"""A job's state as text (the API and the record store's column)."""
JOB_STATES: tuple[JobStateName, ...] = get_args(JobStateName)


class JobState(enum.StrEnum):
    """A job's state; a job in a :attr:`terminal` state never changes again."""

    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES: frozenset[JobState] = frozenset({JobState.succeeded, JobState.failed, JobState.cancelled})

assert tuple(s.value for s in JobState) == JOB_STATES


# ---------------------------------------------------------------------------------------------- key roles
RoleName = Literal["viewer", "submitter", "approver", "admin", "global_admin"]
"""An API key's role as text (the API and the record store's column), lowest first. Every role but
``global_admin`` acts within the key's own project (a project's ``admin`` manages that project's keys);
``global_admin`` — the bootstrap key's role — reads and acts across projects and creates other
projects' keys."""
ROLES: tuple[RoleName, ...] = get_args(RoleName)


class Role(enum.IntEnum):
    """Ordered: a key with a role may do everything the lower roles may."""

    viewer = 1
    submitter = 2
    approver = 3
    admin = 4
    global_admin = 5


assert tuple(Role.__members__) == ROLES
