"""``clgate import``: a per-class table from any framework round-trips to the same log; bad tables exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clgate.cli import app
from clgate.documents import load_log
from clgate.log_import import rows_from_log, write_table

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "logs" / "spec-example.json"
runner = CliRunner()


def _import(*args: str):
    return runner.invoke(app, ["import", *map(str, args)])


@pytest.mark.parametrize("suffix", ["csv", "jsonl"])
@pytest.mark.parametrize("with_task_end", [True, False])
def test_round_trip_gives_the_same_log(tmp_path, suffix, with_task_end):
    log = load_log(EXAMPLE)
    rows = rows_from_log(log)
    if not with_task_end:  # the last point of each task is inferred to be its task end
        rows = [{k: v for k, v in r.items() if k != "task_end"} for r in rows]
    table = write_table(rows, tmp_path / f"table.{suffix}")
    result = _import(table, "--out", tmp_path / "log.json")
    assert result.exit_code == 0, result.output
    assert "3 tasks, 6 classes" in result.stdout
    back = load_log(tmp_path / "log.json")
    assert back.tasks == log.tasks and back.class_names == log.class_names
    assert [p.model_dump() for p in back.points] == [p.model_dump() for p in log.points]
    assert back.meta["imported_from"] == str(table) and back.meta["counts_from_accuracy"] is False
    # and it is a log the metrics read like the original (resources are not in a table: ms, sss, ce …)
    m1 = json.loads(runner.invoke(app, ["metrics", str(EXAMPLE), "--json"]).stdout)["metrics"]
    m2 = json.loads(runner.invoke(app, ["metrics", str(tmp_path / "log.json"), "--json"]).stdout)["metrics"]
    same = {k for k, v in m2.items() if v is not None}
    assert {"acc", "mica", "min_acc"} <= same and {k: m1[k] for k in same} == {k: m2[k] for k in same}


def test_accuracy_with_class_size_and_integer_ids(tmp_path):
    lines = [
        "iteration,task,class,accuracy,total,framework_metric",
        "10,1,0,0.9,10,x",
        "10,1,1,0.3333,3,x",
        "20,2,0,0.5,10,x",
        "20,2,1,0.6667,3,x",
        "20,2,2,1.0,4,x",
    ]
    (tmp_path / "t.csv").write_text("\n".join(lines) + "\n")
    result = _import(tmp_path / "t.csv", "-o", tmp_path / "log.jsonl")
    assert result.exit_code == 0, result.output
    assert "ignored column(s) framework_metric" in result.stdout
    log = load_log(tmp_path / "log.jsonl")
    assert log.class_names is None and log.tasks == [[0, 1], [2]]
    assert [p.correct for p in log.points] == [[9, 1, 0], [5, 2, 4]]
    assert [p.task_end for p in log.points] == [True, True] and log.meta["counts_from_accuracy"] is True


def test_explicit_task_layout_when_future_tasks_are_evaluated(tmp_path):
    rows = [
        {"iteration": i, "task": t, "class": c, "correct": 1, "total": 2}
        for i, t in ((5, 1), (9, 2))
        for c in ("a", "b", "c")
    ]
    table = write_table(rows, tmp_path / "t.jsonl")
    result = _import(table, "-o", tmp_path / "log.json")
    assert result.exit_code == 2 and "--tasks" in result.output  # task 2 would be empty
    result = _import(table, "-o", tmp_path / "log.json", "--tasks", '[["a", "b"], ["c"]]')
    assert result.exit_code == 0, result.output
    assert load_log(tmp_path / "log.json").tasks == [[0, 1], [2]]


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (["iteration,task,class,correct,total", "5,1,0,3,x"], "row 2, column 'total': expected an integer"),
        (["iteration,task,class,correct,total", "5,1,0,3,2"], "row 2, column 'correct': 3 exceeds total 2"),
        (["iteration,task,class,total", "5,1,0,2"], "row 2: missing column(s) correct (or accuracy)"),
        (["iteration,task,class,accuracy,total", "5,1,0,83.3,6"], "row 2, column 'accuracy'"),
        (["iteration,task,class,accuracy,total", "5,1,0,0.7,6"], "is not a whole count"),
        (["iteration,task,class,correct,total", "5,0,0,1,2"], "row 2, column 'task': must be ≥ 1"),
        (
            ["iteration,task,class,correct,total", "5,1,0,1,2", "5,1,0,1,2"],
            "row 3, column 'class': class '0' already",
        ),
        (
            ["iteration,task,class,correct,total", "5,1,0,1,2", "5,2,1,1,2"],
            "row 3, column 'task': task 2 at iteration 5",
        ),
        (["iteration,task,class,correct,total", "5,1,0,1,2", "6,1,3,1,2"], "integer class ids must be 0 … 1"),
        (["iteration,task,class,correct,total", "5,1,0,1,2,9"], "row 2: more cells than header columns"),
        (["iteration,task,class,correct,total", "5,2,0,1,2"], "task(s) [1] evaluate no class"),
        ([], "empty file"),
    ],
)
def test_bad_tables_exit_2_naming_row_and_column(tmp_path, lines, message):
    (tmp_path / "t.csv").write_text("\n".join(lines) + ("\n" if lines else ""))
    result = _import(tmp_path / "t.csv", "-o", tmp_path / "log.json")
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert not (tmp_path / "log.json").exists()


def test_bad_jsonl_and_options(tmp_path):
    (tmp_path / "t.jsonl").write_text(
        '{"iteration": 1, "task": 1, "class": 0, "correct": 1, "total": 1}\n[1]\n'
    )
    result = _import(tmp_path / "t.jsonl", "-o", tmp_path / "l.json")
    assert result.exit_code == 2 and "row 2: expected a JSON object" in result.output
    (tmp_path / "t.txt").write_text("x")
    result = _import(tmp_path / "t.txt", "-o", tmp_path / "l.json")
    assert result.exit_code == 2 and "unknown table format 'txt'" in result.output
    result = _import(tmp_path / "t.jsonl", "-o", tmp_path / "l.json", "--tasks", "[[0")
    assert result.exit_code == 2 and "--tasks: not JSON" in result.output
    result = _import(tmp_path / "missing.csv", "-o", tmp_path / "l.json")
    assert result.exit_code == 2 and "cannot read" in result.output
