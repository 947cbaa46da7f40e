"""The NI/NIC fields of the evaluation log (cells, class_of, groups) and of the job's scenario: every
rule, each error naming its field."""

from __future__ import annotations

import json

import pytest

from clgate.schemas.evaluation_log import EvaluationLog, EvaluationLogError
from clgate.schemas.job import JobSpec, JobSpecError


def _log(**changes: object) -> dict:
    doc: dict = {
        "scenario": "ni",
        "class_of": [0, 1, 0, 1],
        "class_names": ["cat", "dog"],
        "groups": ["day", "night"],
        "tasks": [[0, 1], [2, 3]],
        "points": [
            {"iteration": 1, "task": 1, "task_end": True, "correct": [1, 1, 0, 0], "total": [2, 2, 0, 0]},
            {"iteration": 2, "task": 2, "task_end": True, "correct": [1, 1, 1, 1], "total": [2, 2, 2, 2]},
        ],
    }
    doc.update(changes)
    return {k: v for k, v in doc.items() if v is not None}


def test_a_valid_ni_log_names_its_cells():
    log = EvaluationLog.parse(_log())
    assert log.n_classes == 4 and log.n_real_classes == 2
    assert log.cell_names() == ["cat @ day", "dog @ day", "cat @ night", "dog @ night"]
    assert EvaluationLog.parse(_log(groups=None)).cell_names()[2] == "cat @ task 2"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        pytest.param({"scenario": None}, "class_of: only for scenario ni or nic", id="class-of-in-nc"),
        pytest.param(
            {"scenario": None, "class_of": None}, "groups: only for scenario ni or nic", id="groups-in-nc"
        ),
        pytest.param({"class_of": None}, "class_of: required when scenario is ni", id="no-class-of"),
        pytest.param({"class_of": [0, 1, 0]}, "class_of: 3 entries for 4 cells", id="length"),
        pytest.param({"class_of": [0, 1, 0, 2]}, r"class_of: class id\(s\) 2 out of range", id="range"),
        pytest.param(
            {"class_of": [0, 1, 0, 1], "class_names": ["cat", "dog", "cow"]},
            r"class_of: class id\(s\) 2 belong to no cell",
            id="class-without-cell",
        ),
        pytest.param(
            {"class_of": [0, 0, 1, 1]},
            r"tasks\[0\]: cells 0 and 1 both map to class 0",
            id="same-class-twice",
        ),
        pytest.param(
            {"scenario": "ni", "class_of": [0, 2, 1, 2], "class_names": ["a", "b", "c"]},
            r"tasks\[0\]: scenario ni: the first task brings every class; class id\(s\) 1",
            id="ni-first-task",
        ),
        pytest.param({"groups": ["day"]}, "groups: 1 names for 2 tasks", id="groups-length"),
        pytest.param(
            {"groups": ["day", "day"]},
            "groups: cells 0 and 2 are both class 0 of group 'day'",
            id="group-class-twice",
        ),
        pytest.param(
            {"class_names": ["cat", "dog", "cat2", "dog2"]},
            r"class_of: class id\(s\) 2, 3 belong to no cell",
            id="names",
        ),
        pytest.param({"scenario": "x"}, "scenario: Input should be 'nc', 'ni' or 'nic'", id="scenario"),
    ],
)
def test_log_rules_name_the_field(changes: dict, message: str):
    with pytest.raises(EvaluationLogError, match=message):
        EvaluationLog.parse(_log(**changes))


def test_nic_allows_new_classes_later_and_a_returning_group():
    doc = _log(
        scenario="nic",
        class_of=[0, 0, 1],
        groups=["day", "night"],
        tasks=[[0], [1, 2]],
        points=[
            {"iteration": 1, "task": 1, "task_end": True, "accuracy": [0.5, None, None]},
            {"iteration": 2, "task": 2, "task_end": True, "accuracy": [0.5, 0.5, 0.5]},
        ],
    )
    assert EvaluationLog.parse(doc).cell_names() == ["cat @ day", "cat @ night", "dog @ night"]


def test_the_json_schema_lists_the_scenario_fields():
    schema = EvaluationLog.model_json_schema()
    assert {"scenario", "class_of", "groups"} <= set(schema["properties"])
    assert schema["properties"]["scenario"]["enum"] == ["nc", "ni", "nic"]
    assert set(schema["required"]) == {"tasks", "points"}
    json.dumps(schema)


# ---------------------------------------------------------------------- job spec
@pytest.mark.parametrize(
    ("scenario", "message"),
    [
        pytest.param({"n_tasks": 2, "groups": ["a", "b"]}, "groups: only for type ni or nic", id="groups-nc"),
        pytest.param({"type": "ni", "tasks": [[0]]}, "tasks: only for type nc", id="tasks-ni"),
        pytest.param({"type": "ni", "classes": [[0]]}, "classes: only for type nic", id="classes-ni"),
        pytest.param(
            {"type": "ni", "groups": ["a", "a"]}, "groups: a group appears more than once", id="dup"
        ),
        pytest.param(
            {"type": "ni", "n_tasks": 3, "groups": ["a", "b"]}, "n_tasks is 3 but groups lists 2", id="n"
        ),
        pytest.param({"type": "nic", "groups": ["a"]}, "nic needs groups .* and classes", id="nic-needs"),
        pytest.param(
            {"type": "nic", "groups": ["a", "b"], "classes": [[0]]},
            "classes: 1 lists for 2 groups",
            id="nic-len",
        ),
        pytest.param(
            {"type": "nic", "groups": ["a", "a"], "classes": [[0, 1], [1, 2]]},
            r"classes\[1\]: group 'a' already brought class\(es\) \[1\] in task 1",
            id="nic-again",
        ),
        pytest.param(
            {"type": "nic", "groups": ["a"], "classes": [[]]}, r"classes\[0\]: a task brings", id="empty"
        ),
        pytest.param(
            {"type": "ni", "groups": ["a @ b"]}, "groups: 'a @ b' is not a group name", id="group-name"
        ),
        pytest.param(
            {"type": "ni", "groups": ["a"], "first_task_learned": True}, "at least 2 tasks", id="ftl"
        ),
    ],
)
def test_job_scenario_rules_name_the_field(scenario: dict, message: str):
    with pytest.raises(JobSpecError, match=message):
        JobSpec.parse({"data": "digits", "scenario": scenario})


def test_job_data_group_sources():
    spec = JobSpec.parse(
        {"data": {"kind": "digits", "shift": {"type": "rotation"}}, "scenario": {"type": "ni"}}
    )
    assert spec.data.shift is not None and spec.data.shift.groups == 3
    with pytest.raises(JobSpecError, match="leave no light"):
        JobSpec.parse(
            {
                "data": {"kind": "digits", "shift": {"type": "brightness", "step": 0.6}},
                "scenario": {"type": "ni"},
            }
        )
    with pytest.raises(JobSpecError, match=r"data\.groups: String should match pattern"):
        JobSpec.parse(
            {"data": {"kind": "npz", "path": "x.npz", "groups": "1bad"}, "scenario": {"n_tasks": 1}}
        )
    spec = JobSpec.parse(
        {"data": "synthetic", "scenario": {"type": "ni", "samples": {"a": {"train": [0], "test": [1]}}}}
    )
    assert spec.scenario.samples["a"].test == [1]
