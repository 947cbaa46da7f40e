"""``clgate import`` of what loggers keep: accuracies rounded to a few decimals, class sizes given
outside the table, or accuracies alone (a rates log)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from clgate.cli import app
from clgate.documents import load_log
from clgate.log_import import count_candidates, rows_from_log, write_table
from clgate.schemas.evaluation_log import EvaluationLog

runner = CliRunner()


def _import(*args: object):
    return runner.invoke(app, ["import", *map(str, args)])


def _random_log(seed: int, *, max_total: int = 0, sizes: list[int] | None = None) -> EvaluationLog:
    """A valid log with counts (6 classes, 3 tasks); each class keeps one size: ``sizes``, or drawn in
    [1, max_total]."""
    n_classes, n_tasks = 6, 3
    rng = np.random.default_rng(seed)
    tasks = rng.permutation(n_classes).reshape(n_tasks, -1).tolist()
    drawn = np.array(sizes) if sizes is not None else rng.integers(1, max_total + 1, n_classes)
    points, iteration = [], 0
    for k in range(1, n_tasks + 1):
        seen = np.isin(np.arange(n_classes), [c for t in tasks[:k] for c in t])
        for q in range(3):
            iteration += 10
            total = np.where(seen, drawn, 0)
            correct = (rng.random(n_classes) * (total + 1)).astype(int).clip(0, total)
            points.append(
                {
                    "iteration": iteration,
                    "task": k,
                    "task_end": q == 2,
                    "correct": correct.tolist(),
                    "total": total.tolist(),
                }
            )
    return EvaluationLog.model_validate({"tasks": tasks, "points": points})


def _rounded(rows: list[dict], decimals: int, *, keep_total: bool = True) -> list[dict]:
    """The table a logger keeps: ``correct`` replaced by ``correct / total`` written with ``decimals``."""
    out = []
    for r in rows:
        row = {k: v for k, v in r.items() if k != "correct" and (keep_total or k != "total")}
        row["accuracy"] = f"{r['correct'] / r['total']:.{decimals}f}"
        out.append(row)
    return out


@pytest.mark.parametrize(("decimals", "max_total"), [(2, 100), (3, 1000)])
@pytest.mark.parametrize("suffix", ["csv", "jsonl"])
def test_rounded_table_round_trips_to_identical_counts(tmp_path, decimals, max_total, suffix):
    # at d decimals, a class of at most 10^d samples has exactly one count per rounded accuracy
    log = _random_log(decimals, max_total=max_total)
    table = write_table(_rounded(rows_from_log(log), decimals), tmp_path / f"t.{suffix}")
    result = _import(table, "-o", tmp_path / "log.json", "--decimals", decimals)
    assert result.exit_code == 0, result.output
    back = load_log(tmp_path / "log.json")
    assert [p.model_dump() for p in back.points] == [p.model_dump() for p in log.points]
    assert back.meta["counts_from_accuracy"] is True and back.meta["accuracy_decimals"] == decimals


def test_large_classes_rebuild_every_unambiguous_count(tmp_path):
    log = _random_log(7, sizes=[7, 60, 100, 250, 1200, 5000])
    rows = rows_from_log(log)
    table = write_table(_rounded(rows, 2), tmp_path / "t.csv")
    result = _import(table, "-o", tmp_path / "log.json", "--decimals", "2")
    assert result.exit_code == 2 and "ambiguous" in result.output  # the default refuses
    result = _import(table, "-o", tmp_path / "log.json", "--decimals", "2", "--on-ambiguous", "nearest")
    assert result.exit_code == 0, result.output
    back = load_log(tmp_path / "log.json")
    got = {(p.iteration, c): n for p in back.points for c, n in enumerate(p.correct) if p.total[c]}
    checked = 0
    for r in rows:
        candidates = count_candidates(float(f"{r['correct'] / r['total']:.2f}"), r["total"], 2)
        c = log.class_names.index(r["class"]) if log.class_names else int(r["class"])
        assert r["correct"] in candidates and got[r["iteration"], c] in candidates
        if len(candidates) == 1:
            assert got[r["iteration"], c] == r["correct"]
            checked += 1
    assert checked  # classes of up to 100 samples are in this log


def test_ambiguity_is_refused_naming_the_row_and_the_candidates(tmp_path):
    (tmp_path / "t.csv").write_text(
        "iteration,task,class,accuracy,total\n10,1,cat,0.9,10\n10,1,dog,0.5,300\n"
    )
    result = _import(tmp_path / "t.csv", "-o", tmp_path / "log.json", "--decimals", "2")
    assert result.exit_code == 2, result.output
    assert "row 3 (class 'dog', iteration 10), column 'accuracy': ambiguous" in result.output
    assert "149/300, 150/300, 151/300" in result.output and "--on-ambiguous nearest" in result.output
    result = _import(
        tmp_path / "t.csv", "-o", tmp_path / "log.json", "--decimals", "2", "--on-ambiguous", "nearest"
    )
    assert result.exit_code == 0, result.output
    assert load_log(tmp_path / "log.json").points[0].correct == [9, 150]


@pytest.mark.parametrize(
    ("accuracy", "total", "decimals", "candidates", "taken"),
    [
        pytest.param("0.3", 2, 0, [0, 1], 1, id="0.5-is-nearer-0.3-than-0"),
        pytest.param("0.75", 4, 0, [1, 2, 3, 4], 3, id="exact-count-among-four"),
        pytest.param("0.5", 3, 0, [0, 1, 2, 3], 1, id="tie-1/3-2/3-takes-the-lower"),
        pytest.param("0.5", 300, 2, [149, 150, 151], 150, id="middle"),
    ],
)
def test_nearest_takes_the_nearest_count_and_the_lower_on_a_tie(
    tmp_path, accuracy, total, decimals, candidates, taken
):
    assert list(count_candidates(float(accuracy), total, decimals)) == candidates
    (tmp_path / "t.csv").write_text(f"iteration,task,class,accuracy,total\n10,1,a,{accuracy},{total}\n")
    args = ("-o", tmp_path / "log.json", "--decimals", decimals, "--on-ambiguous", "nearest")
    result = _import(tmp_path / "t.csv", *args)
    assert result.exit_code == 0, result.output
    assert load_log(tmp_path / "log.json").points[0].correct == [taken]


def test_no_count_rounds_to_the_accuracy(tmp_path):
    (tmp_path / "t.csv").write_text("iteration,task,class,accuracy,total\n10,1,a,0.25,2\n")
    result = _import(tmp_path / "t.csv", "-o", tmp_path / "log.json", "--decimals", "1")
    assert result.exit_code == 2, result.output
    assert "row 2 (class 'a', iteration 10), column 'accuracy': 0.25 is not any count out of total 2" in (
        result.output
    )


def test_without_decimals_a_rounded_accuracy_is_refused_with_a_hint(tmp_path):
    (tmp_path / "t.csv").write_text("iteration,task,class,accuracy,total\n10,1,cat,0.43,30\n")
    result = _import(tmp_path / "t.csv", "-o", tmp_path / "log.json")
    assert result.exit_code == 2 and "is not a whole count" in result.output
    assert "give --decimals N" in result.output
    result = _import(tmp_path / "t.csv", "-o", tmp_path / "log.json", "--decimals", "2")
    assert result.exit_code == 0, result.output
    assert load_log(tmp_path / "log.json").points[0].correct == [13]


def test_correct_and_rounded_accuracy_must_agree(tmp_path):
    lines = ["iteration,task,class,correct,accuracy,total", "10,1,cat,13,0.43,30"]
    (tmp_path / "t.csv").write_text("\n".join(lines) + "\n")
    assert _import(tmp_path / "t.csv", "-o", tmp_path / "l.json", "--decimals", "2").exit_code == 0
    (tmp_path / "t.csv").write_text("\n".join([*lines[:1], "10,1,cat,14,0.43,30"]) + "\n")
    result = _import(tmp_path / "t.csv", "-o", tmp_path / "l.json", "--decimals", "2")
    assert result.exit_code == 2, result.output
    assert "row 2 (class 'cat', iteration 10), column 'accuracy': 0.43 disagrees with" in result.output
    assert "14/30 rounded to 2 decimals" in result.output


ACCURACY_ONLY = (
    "iteration,task,class,accuracy\n10,1,cat,0.67\n10,1,dog,0.5\n20,2,cat,0.43\n20,2,dog,0.6\n20,2,eel,0.92\n"
)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("sizes.json", '{"cat": 30, "dog": 40, "eel": 25}'),
        ("sizes.csv", "class,total\ncat,30\ndog,40\neel,25\n"),
    ],
)
def test_accuracy_only_table_with_a_totals_file(tmp_path, name, text):
    (tmp_path / "t.csv").write_text(ACCURACY_ONLY)
    (tmp_path / name).write_text(text)
    result = _import(
        tmp_path / "t.csv", "-o", tmp_path / "l.json", "--decimals", "2", "--totals", tmp_path / name
    )
    assert result.exit_code == 0, result.output
    log = load_log(tmp_path / "l.json")
    assert [p.correct for p in log.points] == [[20, 20, 0], [13, 24, 23]]
    assert [p.total for p in log.points] == [[30, 40, 0], [30, 40, 25]]


def test_accuracy_only_table_with_one_size_for_every_class(tmp_path):
    (tmp_path / "t.csv").write_text(ACCURACY_ONLY)
    result = _import(tmp_path / "t.csv", "-o", tmp_path / "l.json", "--decimals", "2", "--total", "100")
    assert result.exit_code == 0, result.output
    assert [p.correct for p in load_log(tmp_path / "l.json").points] == [[67, 50, 0], [43, 60, 92]]


def test_accuracy_only_table_without_sizes_is_a_rates_log(tmp_path):
    (tmp_path / "t.csv").write_text(ACCURACY_ONLY)
    result = _import(tmp_path / "t.csv", "-o", tmp_path / "l.json")
    assert result.exit_code == 0, result.output
    assert "accuracies only" in result.stdout and "--totals" in result.stdout
    log = load_log(tmp_path / "l.json")
    assert [p.accuracy for p in log.points] == [[0.67, 0.5, None], [0.43, 0.6, 0.92]]
    assert all(p.correct is None for p in log.points) and log.meta["accuracy_only"] is True
    metrics = json.loads(runner.invoke(app, ["metrics", str(tmp_path / "l.json"), "--json"]).stdout)[
        "metrics"
    ]
    assert metrics["mica"][-1] == pytest.approx(0.43) and metrics["mica_lcb"][-1] is None
    # a .npz holds counts only: said, not crashed
    result = _import(tmp_path / "t.csv", "-o", tmp_path / "l.npz")
    assert result.exit_code == 2 and "--out" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("table", "args", "message"),
    [
        (ACCURACY_ONLY, ["--decimals", "-1"], "--decimals"),
        (ACCURACY_ONLY, ["--total", "0"], "--total"),
        (ACCURACY_ONLY, ["--totals", "{sizes}", "--total", "3"], "--totals and --total: give one"),
        (ACCURACY_ONLY, ["--on-ambiguous", "nearest"], "--on-ambiguous: only applies with --decimals"),
        (ACCURACY_ONLY, ["--on-ambiguous", "maybe"], "--on-ambiguous"),
        (ACCURACY_ONLY, ["--decimals", "2"], "--decimals: rebuilding counts needs each class's size"),
        (ACCURACY_ONLY, ["--totals", "{missing}"], "cannot read"),
        (ACCURACY_ONLY, ["--totals", "{bad}"], "invalid JSON"),
        (
            ACCURACY_ONLY,
            ["--decimals", "2", "--totals", "{partial}"],
            "row 6, column 'class': class 'eel' has no size in --totals",
        ),
        (
            ACCURACY_ONLY,
            ["--decimals", "2", "--totals", "{extra}"],
            "--totals: class(es) ['fox'] never appear",
        ),
        (ACCURACY_ONLY, ["--totals", "{zero}"], "class 'dog', total: must be ≥ 1, got 0"),
        (ACCURACY_ONLY, ["--totals", "{nocols}"], "expected a CSV header with the columns class and total"),
        (
            "iteration,task,class,accuracy,total\n10,1,cat,0.67,30\n",
            ["--total", "40"],
            "row 2, column 'total': 30, but the given size of class 'cat' is 40",
        ),
        (
            "iteration,task,class,correct,accuracy\n10,1,cat,3,0.5\n",
            [],
            "row 2: missing column(s) total (or --totals FILE / --total N",
        ),
        (
            "iteration,task,class,accuracy,total\n10,1,cat,0.5,6\n10,1,dog,0.5,\n",
            [],
            "row 3: missing column(s) total",
        ),
        (
            "iteration,task,class,accuracy,total\n10,1,cat,0.5,0\n",
            ["--decimals", "2"],
            "total is 0",
        ),
    ],
)
def test_bad_options_and_sizes_exit_2(tmp_path, table, args, message):
    files = {
        "sizes": '{"cat": 30, "dog": 40, "eel": 25}',
        "bad": '{"cat": 30',
        "partial": '{"cat": 30, "dog": 40}',
        "extra": '{"cat": 30, "dog": 40, "eel": 25, "fox": 9}',
        "zero": '{"cat": 30, "dog": 0, "eel": 25}',
    }
    for key, text in files.items():
        (tmp_path / f"{key}.json").write_text(text)
    (tmp_path / "nocols.csv").write_text("name,size\ncat,30\n")
    paths = {key: tmp_path / f"{key}.json" for key in [*files, "missing"]} | {
        "nocols": tmp_path / "nocols.csv"
    }
    (tmp_path / "t.csv").write_text(table)
    result = _import(tmp_path / "t.csv", "-o", tmp_path / "l.json", *(a.format(**paths) for a in args))
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert not (tmp_path / "l.json").exists()


@settings(max_examples=300, deadline=None)
@given(total=st.integers(1, 3000), data=st.data(), decimals=st.integers(0, 4))
def test_candidates_are_exactly_the_counts_that_round_to_the_accuracy(total, data, decimals):
    correct = data.draw(st.integers(0, total))
    shown = float(f"{correct / total:.{decimals}f}")  # what a logger writes
    candidates = count_candidates(shown, total, decimals)
    bound = 0.5 * 10.0**-decimals
    brute = [c for c in range(total + 1) if abs(c / total - shown) <= bound + 1e-9]
    assert list(candidates) == brute and correct in candidates
    if total <= 10**decimals:  # a step of 1/total is no finer than the rounding: one count
        assert list(candidates) == [correct]
    else:
        assert len(candidates) <= math.ceil(total * 2 * bound) + 1
