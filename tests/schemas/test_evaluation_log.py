"""One test per validation rule of ``docs/evaluation-log.md``, asserting the message."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from clgate.documents import dump_log, load_log
from clgate.schemas import EvaluationLog, EvaluationLogError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "logs" / "spec-example.json"


@pytest.fixture
def doc() -> dict:
    return json.loads(EXAMPLE.read_text())


def problems(data: dict) -> list[str]:
    with pytest.raises(EvaluationLogError) as info:
        EvaluationLog.parse(data)
    return info.value.problems


def test_example_log_is_valid(doc: dict) -> None:
    log = EvaluationLog.parse(doc)
    assert (log.n_tasks, log.n_classes, log.finished_tasks) == (3, 6, 3)
    assert log.task_end_indices() == [1, 3, 5]
    assert log.class_label(2) == "crack"


@pytest.mark.parametrize(
    "tasks, expected",
    [
        pytest.param(
            [[0, 1], [1, 2], [3, 4, 5]],
            "tasks[1]: class 1 already belongs to tasks[0] (tasks must be disjoint)",
            id="overlap",
        ),
        pytest.param([[0, 1], [2, 3], [4, 6]], "tasks: class ids must be 0 … 5; missing 5", id="missing-id"),
        pytest.param(
            [[0, 1], [], [2, 3, 4, 5]], "tasks[1]: a task must hold at least one class", id="empty-task"
        ),
        pytest.param([[0, 1], [2, -3], [4, 5]], "tasks[1]: class id -3 is negative", id="negative-id"),
        pytest.param([], "tasks: at least one task is required", id="no-tasks"),
    ],
)
def test_task_split_rules(doc: dict, tasks: list, expected: str) -> None:
    doc["tasks"] = tasks
    assert expected in problems(doc)


def test_class_names_must_match_classes(doc: dict) -> None:
    doc["class_names"] = doc["class_names"][:5]
    assert "class_names: 5 names for 6 classes in tasks" in problems(doc)


def test_class_names_must_be_unique(doc: dict) -> None:
    doc["class_names"][5] = "scratch"
    assert "class_names: duplicate names scratch" in problems(doc)


def test_correct_exceeding_total(doc: dict) -> None:
    doc["points"][3]["correct"][1] = 70
    assert problems(doc) == ["points[3].correct[1]: correct (70) exceeds total (50)"]


@pytest.mark.parametrize("field", ["correct", "total"])
def test_negative_counts(doc: dict, field: str) -> None:
    doc["points"][2][field][4] = -1
    assert f"points[2].{field}[4]: count (-1) is negative" in problems(doc)


@pytest.mark.parametrize("field", ["correct", "total"])
def test_counts_beyond_what_a_float_holds_are_refused(doc: dict, field: str) -> None:
    """Metrics compute in floats: a count above 2**53 is no held-out set and would crash or round."""
    point = doc["points"][2]
    point["total"][4] = 10**30
    if field == "correct":
        point["correct"][4] = 10**30
    assert problems(doc) == [f"points[2].{field}[4]: count (1e+30) is above 2**53"]


@pytest.mark.parametrize("field", ["correct", "total"])
def test_count_length_must_be_c(doc: dict, field: str) -> None:
    doc["points"][0][field] = doc["points"][0][field][:4]
    assert problems(doc) == [f"points[0].{field}: has 4 entries, expected C = 6"]


def test_accuracy_length_must_be_c(doc: dict) -> None:
    point = doc["points"][0]
    del point["correct"], point["total"]
    point["accuracy"] = [0.8, 0.7, None]
    assert problems(doc) == ["points[0].accuracy: has 3 entries, expected C = 6"]


@pytest.mark.parametrize(
    "value, shown",
    [
        pytest.param(1.5, "1.5", id="above-one"),
        pytest.param(-0.1, "-0.1", id="negative"),
        pytest.param(math.nan, "NaN", id="nan"),
    ],
)
def test_accuracy_outside_unit_interval(doc: dict, value: float, shown: str) -> None:
    point = doc["points"][0]
    del point["correct"], point["total"]
    point["accuracy"] = [0.8, value, None, None, None, None]
    text = json.dumps(doc)  # NaN is written as the JSON extension literal NaN, as Python and pydantic read it
    with pytest.raises(EvaluationLogError) as info:
        EvaluationLog.parse(text)
    assert info.value.problems == [f"points[0].accuracy[1]: {shown} is not a fraction in [0, 1]"]


def test_accuracy_instead_of_counts_is_valid(doc: dict) -> None:
    for point in doc["points"]:
        point["accuracy"] = [
            c / t if t else None for c, t in zip(point.pop("correct"), point.pop("total"), strict=True)
        ]
    log = EvaluationLog.parse(doc)
    assert not log.points[0].has_counts


def test_counts_and_accuracy_are_exclusive(doc: dict) -> None:
    doc["points"][0]["accuracy"] = [0.5] * 6
    assert problems(doc) == ["points[0]: give either correct/total counts or accuracy, not both"]


def test_point_needs_some_measure(doc: dict) -> None:
    del doc["points"][0]["correct"], doc["points"][0]["total"]
    assert problems(doc) == ["points[0]: a point needs correct/total counts or accuracy"]


def test_correct_without_total(doc: dict) -> None:
    del doc["points"][0]["total"]
    assert problems(doc) == ["points[0]: correct and total must be given together"]


def test_iterations_strictly_increasing(doc: dict) -> None:
    doc["points"][2]["iteration"] = 100
    assert problems(doc) == [
        "points[2].iteration: 100 is not after the previous point's 100 (iterations must strictly increase)"
    ]


def test_task_without_task_end(doc: dict) -> None:
    doc["points"][3]["task_end"] = False
    msgs = problems(doc)
    assert (
        "points[4].task: task 2 ended without a task_end point (its last point must have task_end: true)"
        in msgs
    )


def test_last_task_without_task_end(doc: dict) -> None:
    doc["points"][5]["task_end"] = False
    assert problems(doc) == [
        "points: task(s) 3 have no task_end point "
        "(every task needs exactly one; set partial: true for a run that was cut short)"
    ]


def test_several_task_ends(doc: dict) -> None:
    doc["points"][2]["task_end"] = True
    assert (
        "points[3].task_end: task 2 already has a task_end point at points[2] (exactly one per task)"
        in problems(doc)
    )


def test_task_end_not_last_point_of_task(doc: dict) -> None:
    later = copy.deepcopy(doc["points"][1])
    later.update(iteration=120, task_end=False)
    doc["points"].insert(2, later)
    assert problems(doc) == [
        "points[2].task_end: points[1] already ended task 1; "
        "the task_end point must be the last point of its task"
    ]


def test_task_going_backwards(doc: dict) -> None:
    doc["points"][4]["task"] = 2
    doc["points"][4]["task_end"] = False
    msgs = problems(doc)
    assert any(m.startswith("points[4].task_end: points[3] already ended task 2") for m in msgs)
    doc = json.loads(EXAMPLE.read_text())
    doc["points"][4]["task"] = 1
    assert "points[4].task: goes backwards from task 2 to task 1" in problems(doc)


def test_task_beyond_the_split(doc: dict) -> None:
    doc["points"][5]["task"] = 4
    assert "points[5].task: task 4 does not exist (the log has 3 tasks)" in problems(doc)


def test_task_end_must_evaluate_all_seen_classes(doc: dict) -> None:
    doc["points"][3]["total"][0] = 0
    doc["points"][3]["correct"][0] = 0
    assert problems(doc) == [
        "points[3]: task-end point of task 2 does not evaluate class(es) 0 of tasks 1 … 2"
    ]


def test_points_before_first_update_are_allowed(doc: dict) -> None:
    first = {
        "iteration": 0,
        "task": 1,
        "task_end": False,
        "correct": [0, 0, 0, 0, 0, 0],
        "total": [0, 0, 0, 0, 0, 0],
    }
    doc["points"].insert(0, first)
    assert EvaluationLog.parse(doc).points[0].iteration == 0


def test_field_types_are_checked_with_their_path(doc: dict) -> None:
    doc["points"][3]["iteration"] = "late"
    assert problems(doc) == [
        "points[3].iteration: Input should be a valid integer, unable to parse string as an integer"
    ]


def test_unknown_format_is_rejected(doc: dict) -> None:
    doc["format"] = "clgate.evaluation-log/v2"
    assert problems(doc) == ["format: Input should be 'clgate.evaluation-log/v1'"]


def test_resources_one_per_task_in_order(doc: dict) -> None:
    doc["resources"] = doc["resources"][:2]
    assert problems(doc) == ["resources: 2 entries, expected one per task (3)"]
    doc["resources"] = [doc["resources"][1], doc["resources"][0], doc["resources"][1]]
    msgs = problems(doc)
    assert "resources[0].task: is 2, expected 1 (one entry per task, in order)" in msgs


def test_partial_log_allows_unfinished_trailing_tasks(doc: dict) -> None:
    doc["points"] = doc["points"][:3]
    doc["resources"] = doc["resources"][:1]
    with pytest.raises(EvaluationLogError):
        EvaluationLog.parse(doc)
    doc["partial"] = True
    log = EvaluationLog.parse(doc)
    assert log.finished_tasks == 1


def test_many_problems_are_reported_together_and_capped(doc: dict) -> None:
    for point in doc["points"]:
        point["correct"] = [60] * 6
        point["total"] = [50] * 6
    msgs = problems(doc)
    assert len(msgs) == 6 and all("exceeds total" in m for m in msgs)


def test_load_names_the_file_and_round_trips_jsonl(tmp_path: Path, doc: dict) -> None:
    bad = tmp_path / "bad.json"
    doc["points"][3]["correct"][1] = 70
    bad.write_text(json.dumps(doc))
    with pytest.raises(EvaluationLogError) as info:
        load_log(bad)
    assert str(info.value).startswith(f"{bad}: invalid evaluation log")

    good = load_log(EXAMPLE)
    path = tmp_path / "log.jsonl"
    dump_log(good, path)
    assert load_log(path) == good
    assert len(path.read_text().splitlines()) == 1 + len(good.points)


def test_load_reports_broken_json_and_missing_file(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"tasks": [[0]], "points": [')
    with pytest.raises(EvaluationLogError) as info:
        load_log(broken)
    assert "Invalid JSON" in info.value.problems[0]
    with pytest.raises(EvaluationLogError) as info:
        load_log(tmp_path / "nowhere.json")
    assert info.value.problems[0].startswith("cannot read file")
