"""Log files read straight into arrays (:mod:`clgate.logfile`): the streaming JSON path and the ``.npz``
encoding give the same tensors, metrics, hash and decision as the pydantic path, and refuse what it
refuses with the same messages (the ``.npz`` ones naming the member)."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clgate.documents import dump_log, load_log
from clgate.logfile import contract_problems, read_log, write_log
from clgate.metrics import LogArrays, compute_metrics
from clgate.policy import evaluate, log_hash
from clgate.schemas import EvaluationLog
from clgate.schemas.evaluation_log import EvaluationLogError

SETTINGS = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
EXAMPLE = Path(__file__).parents[2] / "examples" / "logs" / "spec-example.json"


@st.composite
def count_logs(draw) -> dict:
    """A valid log with counts: 1-3 tasks, 1-4 points per task, maybe partial, resources, names."""
    sizes = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    C = sum(sizes)
    order = draw(st.permutations(range(C)))
    tasks, at = [], 0
    for s in sizes:
        tasks.append(list(order[at : at + s]))
        at += s
    finished = draw(st.integers(0, len(tasks))) if draw(st.booleans()) else len(tasks)
    points, iteration = [], draw(st.integers(0, 3))
    for k in range(1, min(finished + 1, len(tasks)) + 1):
        seen = {c for t in tasks[:k] for c in t}
        n = draw(st.integers(1, 4))
        for q in range(n):
            end = q == n - 1 and k <= finished
            total = [draw(st.integers(1, 300)) if c in seen or draw(st.booleans()) else 0 for c in range(C)]
            if not end:
                total = [t if draw(st.booleans()) else 0 for t in total]
            correct = [draw(st.integers(0, t)) for t in total]
            points.append(
                {"iteration": iteration, "task": k, "task_end": end, "correct": correct, "total": total}
            )
            iteration += draw(st.integers(1, 50))
    doc: dict = {
        "tasks": tasks,
        "points": points,
        "meta": {"seed": draw(st.integers(0, 9)), "x": [1.5, None]},
    }
    if finished < len(tasks):
        doc["partial"] = True
    if draw(st.booleans()):
        doc["class_names"] = [f"c{c}" for c in range(C)]
    return doc


def _write(doc: dict, path: Path, style: str) -> Path:
    if style == "pydantic":
        dump_log(EvaluationLog.parse(doc), path)
    elif style == "with-nulls":  # every field written, "accuracy": null included
        path.write_text(EvaluationLog.parse(doc).model_dump_json())
    elif style == "indented":
        path.write_text(json.dumps(doc, indent=2))
    else:  # keys in another order, points first
        points = [dict(reversed(list(p.items()))) for p in doc["points"]]
        reordered = {"points": points, **{k: v for k, v in doc.items() if k != "points"}}
        path.write_text(json.dumps(reordered))
    return path


def _same_arrays(a: LogArrays, b: LogArrays) -> None:
    for name in ("iterations", "point_task", "task_end_idx", "task_start_idx", "correct", "total"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    np.testing.assert_array_equal(a.class_acc, b.class_acc)
    assert (a.class_names, a.partial, a.meta, a.finished_tasks) == (
        b.class_names,
        b.partial,
        b.meta,
        b.finished_tasks,
    )


@SETTINGS
@given(doc=count_logs(), style=st.sampled_from(["pydantic", "with-nulls", "indented", "reordered"]))
def test_streaming_read_equals_the_pydantic_path(doc, style, tmp_path):
    path = _write(doc, tmp_path / "log.json", style)
    log = load_log(path)
    arrays = read_log(path)
    assert log_hash(arrays) == log_hash(log)
    _same_arrays(arrays, LogArrays.from_log(log))
    for mode in ("macro", "micro"):
        assert compute_metrics(arrays, task_accuracy=mode, windows=(2, 3)) == compute_metrics(
            log, task_accuracy=mode, windows=(2, 3)
        )


@SETTINGS
@given(doc=count_logs())
def test_npz_round_trip_gives_identical_metrics_hash_and_decision(doc, tmp_path, policy_of):
    log = EvaluationLog.parse(doc)
    written = write_log(log, tmp_path / "log.npz", format="npz")
    arrays = read_log(written[0])
    assert log_hash(arrays) == log_hash(log)
    _same_arrays(arrays, LogArrays.from_log(log))
    assert compute_metrics(arrays, windows=(2, 3)) == compute_metrics(log, windows=(2, 3))
    policy = policy_of(
        {"metric": "mica", "floor": 0.3},
        {"metric": "mica", "bound": "wilson95", "floor": 0.2},
        {"classes": "*", "at": "final", "floor": 0.1},
    )
    assert evaluate([arrays], policy).decision == evaluate([log], policy).decision
    # and back: arrays → JSON is the canonical JSON of the log
    back = write_log(arrays, tmp_path / "back.json", format="json")[0]
    assert load_log(back) == log


@pytest.mark.parametrize(
    ("style", "compact"), [("pydantic", True), ("with-nulls", True), ("indented", True), ("reordered", False)]
)
def test_the_numpy_parser_takes_the_usual_layouts_and_leaves_the_rest_to_ijson(style, compact, tmp_path):
    from clgate import logfile

    path = _write(_spec_doc(), tmp_path / "log.json", style)
    cols = logfile._PointColumns(max_points=10, n_classes=6)
    with path.open("rb") as f:
        if compact:
            assert logfile._read_compact(f, cols)["tasks"] == [[0, 1], [2, 3], [4, 5]]
            assert cols.n == 6
        else:
            with pytest.raises(logfile._Fallback):
                logfile._read_compact(f, cols)


def test_example_log_reads_the_same_every_way(tmp_path):
    log = load_log(EXAMPLE)
    npz = write_log(log, tmp_path / "e.npz", format="npz")[0]
    for arrays in (read_log(EXAMPLE), read_log(npz)):
        assert log_hash(arrays) == log_hash(log)
        assert compute_metrics(arrays) == compute_metrics(log)


def _spec_doc() -> dict:
    return json.loads(EXAMPLE.read_text())


def _bad(mutate) -> dict:
    doc = _spec_doc()
    mutate(doc)
    return doc


BAD = [
    pytest.param(lambda d: d["points"][1]["correct"].__setitem__(0, 51), id="correct-exceeds-total"),
    pytest.param(lambda d: d["points"][1]["correct"].__setitem__(0, 1.5), id="fraction"),
    pytest.param(lambda d: d["points"][1]["correct"].__setitem__(0, -1), id="negative"),
    pytest.param(lambda d: d["points"][1].__setitem__("extra", "}]"), id="unknown-key-with-brackets"),
    pytest.param(lambda d: d["points"][2].__setitem__("iteration", 50), id="iterations-not-increasing"),
    pytest.param(lambda d: d["points"][1].__setitem__("task_end", False), id="task-without-end"),
    pytest.param(lambda d: d["points"][0]["total"].pop(), id="short-list"),
    pytest.param(lambda d: d["points"][3]["total"].__setitem__(2, 0), id="task-end-misses-a-class"),
    pytest.param(lambda d: d["tasks"].__setitem__(1, [2, 2]), id="tasks-overlap"),
    pytest.param(lambda d: d.__setitem__("unknown", 1), id="unknown-top-level-key"),
    pytest.param(lambda d: d.__setitem__("resources", []), id="resources-count"),
]


@pytest.mark.parametrize("mutate", BAD)
def test_a_bad_json_log_is_refused_with_the_contracts_message(mutate, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_bad(mutate)))
    with pytest.raises(EvaluationLogError) as expected:
        load_log(path)
    with pytest.raises(EvaluationLogError) as got:
        read_log(path)
    assert str(got.value) == str(expected.value)


def test_lax_counts_are_read_as_pydantic_reads_them(tmp_path):
    doc = _spec_doc()
    doc["points"][0]["correct"][0] = "41"  # pydantic accepts a numeric string, and so must we
    doc["points"][0]["total"][0] = 50.0
    path = tmp_path / "lax.json"
    path.write_text(json.dumps(doc))
    assert log_hash(read_log(path)) == log_hash(load_log(path))


def test_the_array_checks_agree_with_the_contract_on_counts():
    log = load_log(EXAMPLE)
    arrays = LogArrays.from_log(log)
    assert contract_problems(arrays, log) == []
    arrays.correct[4, 3] = arrays.total[4, 3] + 1
    assert contract_problems(arrays, log) == [
        f"points[4].correct[3]: correct ({arrays.correct[4, 3]}) exceeds total ({arrays.total[4, 3]})"
    ]


def test_auto_writes_the_npz_companion_above_the_threshold(tmp_path):
    log = load_log(EXAMPLE)
    cells = len(log.points) * log.n_classes
    assert write_log(log, tmp_path / "a.json", threshold_cells=cells) == [tmp_path / "a.json"]
    assert write_log(log, tmp_path / "b.json", threshold_cells=cells - 1) == [
        tmp_path / "b.json",
        tmp_path / "b.npz",
    ]
    assert log_hash(read_log(tmp_path / "b.npz")) == log_hash(read_log(tmp_path / "b.json"))


# ---------------------------------------------------------------------------------------------- malformed npz
def _npz(tmp_path: Path, **override) -> Path:
    log = load_log(EXAMPLE)
    path = write_log(log, tmp_path / "ok.npz", format="npz")[0]
    with np.load(path, allow_pickle=False) as z:
        members = {k: z[k] for k in z.files}
    for k, v in override.items():
        if v is None:
            members.pop(k)
        else:
            members[k] = v
    out = tmp_path / "bad.npz"
    buf = io.BytesIO()
    np.savez(buf, **members)
    out.write_bytes(buf.getvalue())
    return out


def _huge_total(tmp_path: Path) -> Path:
    """A member whose .npy header declares an enormous shape (with almost no data)."""
    path = _npz(tmp_path)
    with zipfile.ZipFile(path) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    header = np.lib.format.header_data_from_array_1_0(np.zeros((1, 1), dtype=np.int32))
    header["shape"] = (10**6, 10**6)
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, header)
    members["total.npy"] = buf.getvalue()
    with zipfile.ZipFile(path, "w") as zf:
        for n, data in members.items():
            zf.writestr(n, data)
    return path


MALFORMED = [
    pytest.param(lambda p: _npz(p, total=None), "members", id="missing-member"),
    pytest.param(lambda p: _npz(p, extra=np.zeros(3)), "members", id="extra-member"),
    pytest.param(
        lambda p: _npz(p, correct=np.array([[object()]], dtype=object)), "correct", id="pickled-objects"
    ),
    pytest.param(lambda p: _npz(p, total=np.zeros((6, 6), dtype=float)), "total", id="float-counts"),
    pytest.param(lambda p: _npz(p, correct=np.zeros((5, 6), dtype=np.int32)), "correct", id="wrong-shape"),
    pytest.param(lambda p: _npz(p, task=np.zeros((6, 1), dtype=np.int64)), "task", id="task-2d"),
    pytest.param(
        lambda p: _npz(p, header=np.frombuffer(b"{not json", np.uint8)), "header", id="header-not-json"
    ),
    pytest.param(
        lambda p: _npz(p, header=np.frombuffer(b'{"tasks": [[0, 0]]}', np.uint8)),
        "header",
        id="header-contract",
    ),
    pytest.param(_huge_total, "total", id="declared-shape-too-large"),
]


@pytest.mark.parametrize(("make", "member"), MALFORMED)
def test_a_malformed_npz_is_refused_naming_the_member(make, member, tmp_path):
    path = make(tmp_path)
    with pytest.raises(EvaluationLogError) as exc:
        read_log(path)
    assert exc.value.problems[0].startswith(f"{member}:"), exc.value.problems


def test_an_npz_that_breaks_the_contract_names_the_point(tmp_path):
    correct = np.array(load_log(EXAMPLE).model_dump()["points"][1]["correct"])
    log = load_log(EXAMPLE)
    counts = np.array([p.correct for p in log.points], dtype=np.int32)
    counts[1, 0] = 99
    assert correct[0] != 99
    with pytest.raises(EvaluationLogError) as exc:
        read_log(_npz(tmp_path, correct=counts))
    assert exc.value.problems == ["points[1].correct[0]: correct (99) exceeds total (50)"]


# ------------------------------------------------------------------------------------------ npz speed path
def _random_count_log(
    seed: int, *, n_points: int = 240, n_classes: int = 40, top: int = 300
) -> EvaluationLog:
    """A seeded random log with counts (tasks a permutation of the classes, totals up to ``top``)."""
    rng = np.random.default_rng(seed)
    n_tasks = 4
    tasks = rng.permutation(n_classes).reshape(n_tasks, -1)
    class_task = np.argsort(np.concatenate(tasks)) // (n_classes // n_tasks)
    point_task = np.arange(n_points) * n_tasks // n_points
    ends = np.r_[point_task[1:] != point_task[:-1], True]
    sizes = rng.integers(1, top + 1, n_classes)
    points = []
    for i in range(n_points):
        total = np.where(class_task <= point_task[i], sizes, 0)
        correct = (rng.random(n_classes) * (total + 1)).astype(np.int64).clip(0, total)
        points.append(
            {
                "iteration": 5 * (i + 1),
                "task": int(point_task[i]) + 1,
                "task_end": bool(ends[i]),
                "correct": correct.tolist(),
                "total": total.tolist(),
            }
        )
    return EvaluationLog.model_validate({"tasks": tasks.tolist(), "points": points, "meta": {"seed": seed}})


@pytest.mark.parametrize(
    "top",
    [pytest.param(300, id="counts-in-uint16"), pytest.param(200_000, id="counts-beyond-uint16")],
)
def test_npz_and_json_forms_give_identical_metrics_on_a_random_log(top, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from clgate import logfile
    from clgate.cli import app

    monkeypatch.setattr(logfile, "_READ_BYTES", 4096)  # many chunks: the switch to int32 happens midway
    log = _random_count_log(top, top=top)
    json_path = write_log(log, tmp_path / "log.json", format="json")[0]
    npz_path = write_log(log, tmp_path / "log.npz", format="npz")[0]
    from_json, from_npz = read_log(json_path), read_log(npz_path)
    assert from_npz.correct is not None and from_npz.correct.dtype == (np.uint16 if top < 2**16 else np.int32)
    _same_arrays(from_npz, from_json)
    for mode in ("macro", "micro"):
        assert compute_metrics(from_npz, task_accuracy=mode) == compute_metrics(from_json, task_accuracy=mode)
    assert log_hash(from_npz) == log_hash(from_json) == log_hash(log)
    runner = CliRunner()
    outputs = [runner.invoke(app, ["metrics", str(p), "--json"]) for p in (json_path, npz_path)]
    assert [r.exit_code for r in outputs] == [0, 0], outputs[1].output
    assert outputs[0].stdout == outputs[1].stdout


@pytest.mark.parametrize(
    ("dtype", "value", "problem"),
    [
        pytest.param(np.int64, -3, "points[2].correct[1]: count (-3) is negative", id="negative-int64"),
        pytest.param(
            np.int64, 2**40, "points[2].correct[1]: correct (1099511627776) exceeds", id="beyond-int32"
        ),
        pytest.param(np.uint64, 2**64 - 1, "points[2].correct[1]: count (-1) is negative", id="beyond-int64"),
        pytest.param(
            np.int64, 2**60, "points[2].correct[1]: count (1.15e+18) is above 2**53", id="beyond-float"
        ),
    ],
)
def test_npz_counts_of_any_integer_width_keep_their_values(dtype, value, problem, tmp_path, monkeypatch):
    from clgate import logfile

    monkeypatch.setattr(logfile, "_READ_BYTES", 16)
    log = load_log(EXAMPLE)
    counts = np.array([p.correct for p in log.points], dtype=dtype)
    arrays = read_log(_npz(tmp_path, correct=counts))  # the same counts, written in another dtype
    assert arrays.correct is not None and arrays.correct.dtype == np.uint16
    assert compute_metrics(arrays) == compute_metrics(log)
    counts[2, 1] = value
    with pytest.raises(EvaluationLogError) as exc:
        read_log(_npz(tmp_path, correct=counts))
    assert exc.value.problems[0].startswith(problem), exc.value.problems


def test_an_npz_with_corrupt_compressed_data_is_refused(tmp_path):
    path = write_log(load_log(EXAMPLE), tmp_path / "log.npz", format="npz")[0]
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("correct.npy")
        start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    data = bytearray(path.read_bytes())
    data[start + 10 : start + 30] = b"\xff" * 20
    path.write_bytes(bytes(data))
    with pytest.raises(EvaluationLogError) as exc:
        read_log(path)
    assert "not a readable .npz log" in exc.value.problems[0]
