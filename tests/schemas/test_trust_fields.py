"""Issue 9's new fields: optional with defaults, so logs, jobs and decisions written before stay valid."""

from __future__ import annotations

import pytest

from clgate.schemas.decision import Decision, Hashes
from clgate.schemas.evaluation_log import EvaluationLog, EvaluationLogError
from clgate.schemas.job import JobSpec, JobSpecError

OLD_LOG = {
    "tasks": [[0], [1]],
    "points": [{"iteration": 1, "task": 1, "task_end": True, "accuracy": [0.9, None]}],
    "partial": True,
}


def test_a_log_without_the_new_fields_is_still_valid_and_not_diverged():
    log = EvaluationLog.parse(OLD_LOG)
    assert log.diverged is None and "diverged" not in log.model_dump(exclude_none=True)


def test_diverged_needs_partial_and_names_where():
    log = EvaluationLog.parse({**OLD_LOG, "diverged": {"task": 2, "iteration": 7, "reason": "loss is nan"}})
    assert log.diverged is not None and log.diverged.iteration == 7
    with pytest.raises(EvaluationLogError, match="diverged: a diverged run stopped early"):
        EvaluationLog.parse(
            {
                **OLD_LOG,
                "partial": False,
                "points": OLD_LOG["points"]
                + [{"iteration": 2, "task": 2, "task_end": True, "accuracy": [0.9, 0.9]}],
                "diverged": {"task": 2, "iteration": 2, "reason": "loss is nan"},
            }
        )
    with pytest.raises(EvaluationLogError, match=r"diverged.task"):
        EvaluationLog.parse({**OLD_LOG, "diverged": {"task": 0, "iteration": 7, "reason": "x"}})


def test_a_decision_without_the_new_fields_is_complete():
    d = Decision(
        verdict="PASS",
        summary="PASS",
        policy_name="p",
        policy_version="1",
        rules=[],
        hashes=Hashes(logs=[], policy="x"),
        clgate_version="0",
        runs=1,
    )
    assert d.complete and d.incomplete == [] and d.diverged == []


def test_job_layout_defaults_to_channels_first_and_first_task_learned_needs_weights():
    spec = JobSpec.parse(
        {
            "data": {"kind": "npz", "path": "d.npz"},
            "scenario": {"n_tasks": 2},
            "model": {"arch": "cnn"},
        }
    )
    assert spec.data.layout == "channels_first"
    with pytest.raises(JobSpecError, match=r"data.layout"):
        JobSpec.parse(
            {
                "data": {"kind": "npz", "path": "d.npz", "layout": "NHWC"},
                "scenario": {"n_tasks": 2},
                "model": {"arch": "cnn"},
            }
        )
    with pytest.raises(
        JobSpecError, match=r"scenario.first_task_learned: needs the candidate's trained model"
    ):
        JobSpec.parse(
            {
                "data": "digits",
                "scenario": {"n_tasks": 5, "first_task_learned": True},
                "model": {"arch": "mlp"},
            }
        )
    ok = JobSpec.parse(
        {
            "data": "digits",
            "scenario": {"n_tasks": 5, "first_task_learned": True},
            "model": {"arch": "mlp", "weights": "w.safetensors"},
        }
    )
    assert ok.scenario.first_task_learned
