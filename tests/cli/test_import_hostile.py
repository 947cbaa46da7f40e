"""``clgate import`` against hostile input: every bad table, size file or option exits 2 naming the
file, row, column or option and the reason (never a traceback, a hang, or a count silently taken from
a guess), and ``--on-ambiguous nearest`` is the nearest candidate however many there are."""

from __future__ import annotations

import json
import time
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from clgate.cli import app
from clgate.documents import load_log
from clgate.log_import import count_candidates, nearest_count

runner = CliRunner()
ROW = '{"iteration": 10, "task": 1, "class": "cat", "correct": 5, "total": 10'
DEEP = "[" * 5000 + "]" * 5000


def _import(*args: object):
    return runner.invoke(app, ["import", *map(str, args)])


def _refused(result, *messages: str) -> None:
    """Exit 2 with each message, and no exception escaped (a traceback, an internal error)."""
    assert result.exit_code == 2, (result.output, result.exception)
    assert isinstance(result.exception, SystemExit), result.exception
    flat = " ".join(result.output.split())
    for message in messages:
        assert message in flat, flat


@pytest.mark.parametrize(
    ("table", "files", "args", "messages"),
    [
        pytest.param(
            f"iteration,task,class,accuracy,total\n10,1,cat,0.67,{10**30}\n",
            {},
            ["--decimals", "2"],
            ["row 2, column 'total': must be ≤ 9007199254740992"],
            id="row-total",
        ),
        pytest.param(
            "iteration,task,class,accuracy\n10,1,cat,0.67\n",
            {"sizes.json": '{"cat": 1e300}'},
            ["--decimals", "2", "--totals", "{sizes}"],
            ["sizes.json: class 'cat', total: must be ≤ 9007199254740992"],
            id="totals-float",
        ),
        pytest.param(
            "iteration,task,class,accuracy\n10,1,cat,0.67\n",
            {},
            ["--decimals", "2", "--total", str(2**53 + 1)],
            ["--total: must be ≥ 1 and ≤ 9007199254740992 (2**53)"],
            id="total-option",
        ),
        pytest.param(
            f"iteration,task,class,correct,total\n{10**20},1,cat,5,10\n",
            {},
            [],
            ["row 2, column 'iteration': must be ≤ 9007199254740992"],
            id="iteration",
        ),
    ],
)
def test_a_count_too_large_to_be_a_class_size_is_refused(tmp_path, table, files, args, messages):
    (tmp_path / "t.csv").write_text(table)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    paths = {name.split(".")[0]: tmp_path / name for name in files}
    _refused(
        _import(tmp_path / "t.csv", "-o", tmp_path / "l.json", *(a.format(**paths) for a in args)), *messages
    )


def test_a_huge_task_number_is_refused_at_once_with_a_short_message(tmp_path):
    (tmp_path / "t.csv").write_text(
        "iteration,task,class,correct,total\n10,1,cat,5,10\n20,1000000000,dog,5,10\n"
    )
    started = time.perf_counter()
    result = _import(tmp_path / "t.csv", "-o", tmp_path / "l.json")
    assert time.perf_counter() - started < 5
    _refused(result, "task(s) [2, 3, 4", "evaluate no class that earlier tasks did not")
    assert len(result.output) < 1000


def test_nearest_on_a_large_class_takes_no_time(tmp_path):
    # 10^8 samples at 2 decimals: a million candidates, which were each compared as fractions
    (tmp_path / "t.csv").write_text("iteration,task,class,accuracy,total\n10,1,cat,0.67,100000000\n")
    started = time.perf_counter()
    result = _import(
        tmp_path / "t.csv", "-o", tmp_path / "l.json", "--decimals", 2, "--on-ambiguous", "nearest"
    )
    assert result.exit_code == 0, result.output
    assert time.perf_counter() - started < 2
    assert load_log(tmp_path / "l.json").points[0].correct == [67_000_000]


@settings(max_examples=300, deadline=None)
@given(total=st.integers(1, 5000), data=st.data(), decimals=st.integers(0, 3))
def test_nearest_count_is_the_nearest_candidate_and_the_lower_on_a_tie(total, data, decimals):
    correct = data.draw(st.integers(0, total))
    shown = float(f"{correct / total:.{decimals}f}")
    candidates = count_candidates(shown, total, decimals)
    written = Fraction(repr(shown))
    brute = min(candidates, key=lambda c: (abs(Fraction(c, total) - written), c))
    assert nearest_count(shown, total, candidates) == brute


ACCURACIES = "iteration,task,class,accuracy\n10,1,cat,0.5\n"
COUNTS = "iteration,task,class,correct,total\n10,1,cat,5,10\n"
LONG = "9" * 5000  # past Python's 4300 digits for an integer
NESTED = "invalid JSON (nested too deeply)"


@pytest.mark.parametrize(
    ("name", "table", "totals", "args", "messages"),
    [
        pytest.param("t.jsonl", f'{ROW}, "x": {DEEP}}}\n', None, [], [f"row 1: {NESTED}"], id="row-deep"),
        pytest.param(
            "t.jsonl", f'{ROW}, "x": {LONG}}}\n', None, [], ["row 1: invalid JSON (", "digits"], id="row-long"
        ),
        pytest.param(
            "t.jsonl",
            f'{ROW}, "correct": 6}}\n',
            None,
            [],
            ["row 1: invalid JSON (key 'correct' given twice)"],
            id="row-key-twice",
        ),
        pytest.param(
            "t.csv",
            COUNTS.replace("total", "total,total").replace("10\n", "10,20\n"),
            None,
            [],
            ["row 1: column(s) ['total'] given twice"],
            id="column-twice",
        ),
        pytest.param(
            "t.csv",
            COUNTS.replace("correct", "correct, correct").replace("5,", "5,6,"),
            None,
            [],
            ["row 1: column(s) ['correct'] given twice"],
            id="column-twice-spaced",
        ),
        pytest.param("t.csv", ACCURACIES, DEEP, [], [NESTED], id="totals-deep"),
        pytest.param(
            "t.csv", ACCURACIES, f'{{"cat": {LONG}}}', [], ["invalid JSON (", "digits"], id="totals-long"
        ),
        pytest.param(
            "t.csv",
            ACCURACIES,
            '{"cat": 10, "cat": 20}',
            [],
            ["invalid JSON (key 'cat' given twice)"],
            id="totals-key-twice",
        ),
        pytest.param(
            "t.csv",
            COUNTS,
            None,
            ["--tasks", DEEP],
            ["--tasks: not JSON (nested too deeply)"],
            id="tasks-deep",
        ),
        pytest.param(
            "t.csv",
            COUNTS,
            None,
            ["--tasks", f"[[{LONG}]]"],
            ["--tasks: not JSON (", "digits"],
            id="tasks-long",
        ),
        pytest.param(
            "t.csv",
            "iteration,task,group,class,correct,total\n10,1,d,cat,5,10\n",
            None,
            ["--scenario", "ni", "--groups", DEEP],
            ["--groups: not JSON (nested too deeply)"],
            id="groups-deep",
        ),
    ],
)
def test_json_too_deep_too_long_or_with_a_key_twice_is_refused(tmp_path, name, table, totals, args, messages):
    (tmp_path / name).write_text(table)
    if totals is not None:
        (tmp_path / "s.json").write_text(totals)
        args = ["--decimals", "1", "--totals", tmp_path / "s.json"]
    _refused(_import(tmp_path / name, "-o", tmp_path / "l.json", *args), *messages)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("class,total,total\ncat,10,20\n", "row 1: column(s) ['total'] given twice"),
        ("class,total\ncat,10,20\n", "row 2: more cells than header columns"),
    ],
)
def test_a_totals_csv_with_a_column_twice_or_a_stray_cell_is_refused(tmp_path, text, message):
    (tmp_path / "t.csv").write_text("iteration,task,class,accuracy\n10,1,cat,0.5\n")
    (tmp_path / "s.csv").write_text(text)
    _refused(_import(tmp_path / "t.csv", "-o", tmp_path / "l.json", "--totals", tmp_path / "s.csv"), message)


@pytest.mark.parametrize(
    ("classes", "messages"),
    [
        pytest.param(["0", "00"], ["column 'class': '0' and '00' are both class id 0"], id="leading-zero"),
        pytest.param(["0", "9" * 5000], ["integer class ids must be 0 … 1; got ['99999"], id="long-id"),
    ],
)
def test_integer_class_ids_that_clash_or_overflow_are_refused(tmp_path, classes, messages):
    rows = "".join(f"10,1,{c},5,10\n" for c in classes)
    (tmp_path / "t.csv").write_text("iteration,task,class,correct,total\n" + rows)
    result = _import(tmp_path / "t.csv", "-o", tmp_path / "l.json")
    _refused(result, *messages)
    assert len(result.output) < 1000


@pytest.mark.parametrize("classes", [["²", "³"], ["0", "٠"], ["１", "0"]])
def test_names_of_unicode_digits_are_names_not_ids(tmp_path, classes):
    rows = "".join(f"10,1,{c},5,10\n" for c in classes)
    (tmp_path / "t.csv").write_text("iteration,task,class,correct,total\n" + rows, encoding="utf-8")
    result = _import(tmp_path / "t.csv", "-o", tmp_path / "l.json")
    assert result.exit_code == 0, (result.output, result.exception)
    log = load_log(tmp_path / "l.json")
    assert log.class_names == classes and log.points[0].correct == [5, 5]


@pytest.mark.parametrize("value", [["cat"], {"a": 1}, True, None, 1.5])
@pytest.mark.parametrize("column", ["class", "group"])
def test_a_class_or_group_that_is_not_a_name_is_refused(tmp_path, column, value):
    row = {"iteration": 10, "task": 1, "group": "day", "class": "cat", "correct": 5, "total": 10}
    (tmp_path / "t.jsonl").write_text(json.dumps(row | {column: value}) + "\n")
    result = _import(tmp_path / "t.jsonl", "-o", tmp_path / "l.json", "--scenario", "ni")
    if value is None:  # a missing name, as in an empty CSV cell
        _refused(result, "row 1: missing column(s)")
    else:
        _refused(result, f"row 1, column '{column}': expected a name or an integer id, got {value!r}")


@pytest.mark.parametrize(
    ("accuracy", "total"),
    [("0.4305", 1000), ("0.667", 300), ("0.5", 2999)],
)
def test_without_decimals_an_accuracy_off_a_whole_count_is_refused_for_any_class_size(
    tmp_path, accuracy, total
):
    # the refusal that says to give --decimals held only for classes of under 900 samples
    (tmp_path / "t.csv").write_text(f"iteration,task,class,accuracy,total\n10,1,cat,{accuracy},{total}\n")
    _refused(_import(tmp_path / "t.csv", "-o", tmp_path / "l.json"), "is not a whole count", "--decimals")


@pytest.mark.parametrize(
    ("accuracy", "total", "correct"), [("0.43", 1000, 430), ("0.123456789", 10**9, 123456789)]
)
def test_without_decimals_an_exact_accuracy_of_a_large_class_imports(tmp_path, accuracy, total, correct):
    (tmp_path / "t.csv").write_text(f"iteration,task,class,accuracy,total\n10,1,cat,{accuracy},{total}\n")
    result = _import(tmp_path / "t.csv", "-o", tmp_path / "l.json")
    assert result.exit_code == 0, result.output
    assert load_log(tmp_path / "l.json").points[0].correct == [correct]


def test_an_accuracy_of_a_class_of_size_zero_is_refused_without_decimals_too(tmp_path):
    (tmp_path / "t.csv").write_text("iteration,task,class,accuracy,total\n10,1,cat,0.5,0\n")
    _refused(_import(tmp_path / "t.csv", "-o", tmp_path / "l.json"), "row 2", "total is 0")


@pytest.mark.parametrize("value", ["67%", "0,67", "nan", "inf", "1.0000001", "-0.01", "1e400", "0x1p-1"])
def test_an_accuracy_that_is_not_a_fraction_is_refused_naming_the_cell(tmp_path, value):
    (tmp_path / "t.csv").write_text(f'iteration,task,class,accuracy,total\n10,1,cat,"{value}",100\n')
    result = _import(tmp_path / "t.csv", "-o", tmp_path / "l.json", "--decimals", 2)
    _refused(result, "row 2, column 'accuracy': expected", repr(value))


@pytest.mark.parametrize(("value", "correct"), [("-0.0", 0), (" 0.5 ", 50), ("1e-3", 0), ("1", 100)])
def test_accuracies_that_are_fractions_however_written_import(tmp_path, value, correct):
    (tmp_path / "t.csv").write_text(f'iteration,task,class,accuracy,total\n10,1,cat,"{value}",100\n')
    result = _import(tmp_path / "t.csv", "-o", tmp_path / "l.json", "--decimals", 2)
    assert result.exit_code == 0, result.output
    assert load_log(tmp_path / "l.json").points[0].correct == [correct]


@pytest.mark.parametrize("groups", ["[true]", "5", '"day"', "[]", '[["day"]]'])
def test_groups_that_are_not_a_list_of_names_are_refused(tmp_path, groups):
    (tmp_path / "t.csv").write_text("iteration,task,group,class,correct,total\n10,1,d,cat,5,10\n")
    result = _import(tmp_path / "t.csv", "-o", tmp_path / "l.json", "--scenario", "ni", "--groups", groups)
    _refused(result, "--groups: expected a non-empty list of group names")
