"""``clgate import --scenario ni|nic``: tables of cells (a ``group`` column beside the class) round-trip from
an engine-written NI/NIC log to the same log and metrics; bad tables and options exit 2 naming them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clgate.cli import app
from clgate.documents import load_log
from clgate.engine import run_job
from clgate.log_import import rows_from_log, write_table
from clgate.metrics import compute_metrics
from clgate.schemas.evaluation_log import EvaluationLog
from tests.engine.test_recorder_ni import _parts, _spec
from tests.fixtures.gate import ni_worked_example

runner = CliRunner()
SCENARIOS = {
    "ni": {"type": "ni", "groups": ["night", "day", "dusk"]},
    "nic": {"type": "nic", "groups": ["day", "night", "day"], "classes": [[0, 1], [0, 1, 2], [2]]},
}


@pytest.fixture(scope="module")
def engine_logs(tmp_path_factory) -> dict[str, Path]:
    """One NI and one NIC log written by the engine (a few seconds each)."""
    base = tmp_path_factory.mktemp("engine")
    _parts(base / "parts.npz")
    return {name: run_job(_spec(s), base / name, base_dir=base)[0] for name, s in SCENARIOS.items()}


def _import(*args: object):
    return runner.invoke(app, ["import", *map(str, args)])


def _layout_options(name: str, class_names: list[str]) -> list[str]:
    scenario = SCENARIOS[name]
    options = ["--groups", json.dumps(scenario["groups"])]
    if "classes" not in scenario:
        return options
    return [*options, "--classes", json.dumps([[class_names[c] for c in t] for t in scenario["classes"]])]


@pytest.mark.parametrize("name", ["ni", "nic"])
@pytest.mark.parametrize("layout", ["inferred", "given"])
@pytest.mark.parametrize("suffix", ["csv", "jsonl"])
def test_engine_log_to_table_and_back_gives_the_same_log_and_metrics(
    engine_logs, tmp_path, name, layout, suffix
):
    engine = load_log(engine_logs[name])
    rows = rows_from_log(engine)
    assert list(rows[0]) == ["iteration", "task", "group", "class", "correct", "total", "task_end"]
    if layout == "inferred":  # and the task ends inferred too: the last point of each task
        rows = [{k: v for k, v in r.items() if k != "task_end"} for r in rows]
    table = write_table(rows, tmp_path / f"cells.{suffix}")
    options = _layout_options(name, engine.class_names) if layout == "given" else []
    result = _import(table, "--scenario", name, *options, "--out", tmp_path / "log.json")
    assert result.exit_code == 0, result.output
    assert f"3 tasks, 3 classes in {engine.n_classes} cells ({name})" in result.stdout
    back = load_log(tmp_path / "log.json")
    for field in ("scenario", "class_of", "groups", "tasks", "class_names"):
        assert getattr(back, field) == getattr(engine, field), field
    assert [p.model_dump() for p in back.points] == [p.model_dump() for p in engine.points]
    mine, theirs = compute_metrics(back).metrics, compute_metrics(engine).metrics
    kept = {k for k, v in mine.items() if v is not None}  # a table has no resources: ms, sss, ce … are not
    assert {"acc", "mica", "mica_old", "min_acc", "raa", "forg"} <= kept
    assert {k: mine[k] for k in kept} == {k: theirs[k] for k in kept}
    assert {k for k, v in theirs.items() if v is not None} - kept <= {"ms", "sss", "ce", "lca", "ce_raw"} | {
        k for k in theirs if "ops" in k or "mem" in k
    }


def _table(tmp_path: Path, lines: list[str], name: str = "t.csv") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


NI_TABLE = [
    "iteration,task,group,class,correct,total",
    "5,1,day,cat,9,10",
    "5,1,day,dog,8,10",
    "9,2,day,cat,7,10",
    "9,2,day,dog,8,10",
    "9,2,night,cat,6,10",
    "9,2,night,dog,9,10",
]


def test_the_docs_table_becomes_the_metrics_worked_example(tmp_path):
    result = _import(_table(tmp_path, NI_TABLE), "--scenario", "ni", "-o", tmp_path / "log.json")
    assert result.exit_code == 0, result.output
    log = load_log(tmp_path / "log.json")
    expected = EvaluationLog.parse(ni_worked_example(iterations=(5, 9)))
    assert log.model_dump(exclude={"meta"}) == expected.model_dump(exclude={"meta"})
    assert log.meta["imported_from"].endswith("t.csv") and len(log.meta["table_sha256"]) == 64


def test_cell_or_class_sizes_from_totals(tmp_path):
    lines = [line.rsplit(",", 1)[0] for line in NI_TABLE]  # no total column
    lines = [lines[0].replace("correct", "accuracy")] + [
        ",".join([*row.split(",")[:4], str(int(row.split(",")[4]) / 10)]) for row in lines[1:]
    ]
    (tmp_path / "sizes.json").write_text(json.dumps({"cat @ night": 10, "cat": 10, "dog": 10}))
    result = _import(
        _table(tmp_path, lines),
        "--scenario",
        "ni",
        "--totals",
        tmp_path / "sizes.json",
        "-o",
        tmp_path / "l.json",
    )
    assert result.exit_code == 0, result.output
    assert load_log(tmp_path / "l.json").points[1].correct == [7, 8, 6, 9]
    (tmp_path / "sizes.json").write_text(json.dumps({"cat @ night": 20, "cat": 10, "dog": 10}))
    result = _import(
        _table(tmp_path, lines),
        "--scenario",
        "ni",
        "--totals",
        tmp_path / "sizes.json",
        "-o",
        tmp_path / "l.json",
    )
    assert result.exit_code == 0, result.output
    assert load_log(tmp_path / "l.json").points[1].correct == [7, 8, 12, 9]  # 0.6 of the cell's 20


FUTURE = [  # every cell evaluated from the start: the layout cannot be inferred
    "iteration,task,group,class,correct,total",
    "5,1,day,cat,9,10",
    "5,1,night,cat,2,10",
    "9,2,day,cat,7,10",
    "9,2,night,cat,6,10",
]


@pytest.mark.parametrize(
    ("lines", "args", "message"),
    [
        pytest.param(
            NI_TABLE,
            [],
            "has a 'group' column: for a table of sample groups give --scenario ni or nic",
            id="group-without-scenario",
        ),
        pytest.param(
            [line.replace("group,", "").replace("day,", "").replace("night,", "") for line in NI_TABLE],
            ["--scenario", "ni"],
            "row 2: missing column(s) group (the sample group of the row's cell",
            id="no-group-column",
        ),
        pytest.param(
            NI_TABLE,
            ["--scenario", "ni", "--tasks", "[[0,1]]"],
            "--tasks: the class groups of an nc table",
            id="tasks",
        ),
        pytest.param(
            NI_TABLE, ["--groups", '["day"]'], "--groups: only with --scenario ni or nic", id="groups-in-nc"
        ),
        pytest.param(
            NI_TABLE,
            ["--scenario", "ni", "--classes", "[[0]]"],
            "--classes: only with --scenario nic",
            id="classes-in-ni",
        ),
        pytest.param(
            NI_TABLE, ["--scenario", "nic", "--groups", '["day","night"]'], "give both", id="nic-groups-only"
        ),
        pytest.param(
            NI_TABLE, ["--scenario", "ni", "--groups", "day"], "--groups: not JSON", id="groups-not-json"
        ),
        pytest.param(
            NI_TABLE,
            ["--scenario", "ni", "--groups", '["day","dusk"]'],
            "row 6, column 'group': class 'cat' of group 'night' is in no task of --groups",
            id="group-not-declared",
        ),
        pytest.param(
            NI_TABLE,
            ["--scenario", "ni", "--groups", '["day","day"]'],
            "--groups: a group appears more than once",
            id="repeated-group",
        ),
        pytest.param(
            NI_TABLE,
            [
                "--scenario",
                "nic",
                "--groups",
                '["day","night"]',
                "--classes",
                '[["cat","dog"],["cat","eel"]]',
            ],
            "--classes[1]: class 'eel' never appears",
            id="unknown-class",
        ),
        pytest.param(
            NI_TABLE,
            ["--scenario", "nic", "--groups", '["day","day"]', "--classes", '[["cat","dog"],["cat"]]'],
            "--classes[1]: group 'day' already brought class(es) [0] in task 1",
            id="group-brings-twice",
        ),
        pytest.param(
            [line.replace("night", "ni@ght") for line in NI_TABLE],
            ["--scenario", "ni"],
            "column 'group': 'ni@ght' is not a group name",
            id="at-in-group",
        ),
        pytest.param(
            FUTURE,
            ["--scenario", "ni"],
            "task 1 first evaluates cells of groups 'day', 'night', but a task brings one sample group",
            id="future-tasks",
        ),
        pytest.param(
            [*NI_TABLE, "14,3,day,cat,7,10"],
            ["--scenario", "ni"],
            "task 3 evaluates no cell (a class on a group) that earlier tasks did not",
            id="empty-task",
        ),
        pytest.param(
            [*NI_TABLE, "9,2,night,dog,9,10"],
            ["--scenario", "ni"],
            "row 8, column 'class': class 'dog' of group 'night' already given at iteration 9 (row 7)",
            id="cell-twice",
        ),
        pytest.param(
            [NI_TABLE[0], NI_TABLE[1], NI_TABLE[3], NI_TABLE[5], NI_TABLE[6]],  # dog @ day never evaluated
            ["--scenario", "ni"],
            "tasks[0]: scenario ni: the first task brings every class",
            id="ni-first-task-lacks-a-class",
        ),
    ],
)
def test_bad_tables_and_options_exit_2_naming_them(tmp_path, lines, args, message):
    result = _import(_table(tmp_path, lines), *args, "-o", tmp_path / "log.json")
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split()), result.output


def test_nic_table_with_new_classes_infers_the_layout(tmp_path):
    lines = [*NI_TABLE, "14,3,day,eel,5,10", "14,3,day,cat,7,10", "14,3,day,dog,8,10", "14,3,night,cat,6,10",
             "14,3,night,dog,9,10"]  # fmt: skip
    result = _import(_table(tmp_path, lines), "--scenario", "nic", "-o", tmp_path / "log.json")
    assert result.exit_code == 0, result.output
    log = load_log(tmp_path / "log.json")
    assert log.groups == ["day", "night", "day"] and log.class_of == [0, 1, 0, 1, 2]
    assert log.cell_names()[-1] == "eel @ day" and log.tasks == [[0, 1], [2, 3], [4]]
    # the same table read as ni is refused by the log's own rule: ni is one task per group
    result = _import(_table(tmp_path, lines), "--scenario", "ni", "-o", tmp_path / "log.json")
    assert result.exit_code == 2 and "a group appears more than once" in result.output


def test_an_nc_table_with_a_group_column_imports_as_before_and_says_what_it_could_mean(tmp_path):
    lines = [
        "iteration,task,group,class,correct,total",
        "5,1,day,cat,9,10",
        "9,2,day,cat,7,10",
        "9,2,day,dog,8,10",
    ]
    result = _import(_table(tmp_path, lines), "-o", tmp_path / "log.json")
    assert result.exit_code == 0, result.output
    assert "2 tasks, 2 classes, 2 points; ignored column(s) group (a table of sample groups?" in result.stdout
    log = load_log(tmp_path / "log.json")
    assert log.scenario == "nc" and log.class_of is None and log.meta["ignored_columns"] == ["group"]
