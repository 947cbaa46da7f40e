"""The vocabulary module is the one definition of verdicts, modes, queues and job states."""

from __future__ import annotations

from typing import get_args

import pytest

from clgate.schemas import api, decision, job
from clgate.schemas.vocab import (
    ENGINE_MODES,
    JOB_MODES,
    JOB_STATES,
    QUEUES,
    TERMINAL_STATES,
    VERDICTS,
    JobState,
    exit_code,
    queue_for,
)


def test_the_contract_models_use_the_vocabulary():
    assert api.Mode is not None and get_args(api.Mode) == JOB_MODES
    assert get_args(api.State) == JOB_STATES
    assert get_args(api.JobPublic.model_fields["queue"].annotation) == QUEUES
    assert get_args(decision.Decision.model_fields["verdict"].annotation) == VERDICTS
    assert get_args(job.JobSpec.model_fields["mode"].annotation) == ENGINE_MODES


@pytest.mark.parametrize("mode", JOB_MODES)
def test_engine_modes_go_to_the_gpu_queue(mode):
    assert queue_for(mode) == ("gpu" if mode in ENGINE_MODES else "cpu")
    assert queue_for(mode) in QUEUES


def test_job_states_and_terminal():
    assert [s.value for s in JobState] == list(JOB_STATES)
    assert {s for s in JobState if s.terminal} == TERMINAL_STATES == {"succeeded", "failed", "cancelled"}
    assert JobState("queued") == "queued" and str(JobState.running) == "running"


@pytest.mark.parametrize(
    ("verdict", "strict", "code"),
    [
        ("PASS", False, 0),
        ("PASS", True, 0),
        ("WARN", False, 0),
        ("WARN", True, 1),
        ("FAIL", False, 1),
        ("ERROR", False, 2),
        ("ERROR", True, 2),
    ],
)
def test_exit_codes(verdict, strict, code):
    assert exit_code(verdict, fail_on_warn=strict) == code


def test_one_gate_result():
    from clgate.gate import GateResult as FromGate
    from clgate.policy import Evaluation, GateResult

    assert FromGate is GateResult is Evaluation
