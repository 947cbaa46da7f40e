"""New-instances (NI) and mixed (NIC) scenarios in the engine: tasks are sample groups, the trusted side
counts per cell (task, class), and the child never learns a held-out sample's group or class."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from clgate.documents import load_log
from clgate.engine.data import load_data, load_digits, shift_digits
from clgate.engine.errors import EngineInputError
from clgate.engine.evaluator import select_heldout
from clgate.engine.scenario import scenario_from_spec
from clgate.engine.staging import load_staged, stage_job
from clgate.engine.trusted import HeldoutCounter
from clgate.schemas.job import JobSpec
from tests.fixtures.cli import run_clgate

GROUPS = ("day", "dusk", "night")


def _grouped_npz(path: Path, *, n_classes: int = 3, per_cell: tuple[int, int] = (24, 6)) -> Path:
    """Gaussian class clusters seen under three 'lighting' groups (each group shifts every input)."""
    rng = np.random.default_rng(7)
    centres = rng.normal(0.0, 3.0, size=(n_classes, 6))
    shifts = rng.normal(0.0, 1.5, size=(len(GROUPS), 6))
    arrays: dict[str, np.ndarray] = {}
    for split, n in zip(("train", "test"), per_cell, strict=True):
        # uneven test sizes per (group, class): the counting test can tell cells apart
        sizes = [[n + g + c for c in range(n_classes)] for g in range(len(GROUPS))]
        y = np.concatenate([np.full(s, c) for row in sizes for c, s in enumerate(row)])
        g = np.concatenate([np.full(s, gi) for gi, row in enumerate(sizes) for s in row])
        x = centres[y] + shifts[g] + rng.normal(size=(len(y), 6))
        arrays |= {f"x_{split}": x.astype(np.float32), f"y_{split}": y.astype(np.int64)}
        arrays[f"lighting_{split}"] = np.array(GROUPS)[g]
    np.savez(path, **arrays, class_names=np.array(["bolt", "nut", "washer"]))
    return path


def _job(**scenario: object) -> dict:
    return {
        "data": {"kind": "npz", "path": "parts.npz", "groups": "lighting"},
        "scenario": scenario,
        "model": {"arch": "mlp", "hidden": 32},
        "training": {"lr": 0.1, "batch_size": 8, "epochs": 2},
        "evaluation": {"eval_every": 5},
        "device": "cpu",
    }


def test_ni_groups_become_cells_whose_totals_are_the_held_out_sizes(tmp_path):
    _grouped_npz(tmp_path / "parts.npz")
    spec = JobSpec.parse(_job(type="ni", groups=["night", "day", "dusk"]))
    data = load_data(spec.data, tmp_path)
    s = scenario_from_spec(spec.scenario, data)
    assert s.classes == [[0, 1, 2]] * 3 and s.cells == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert s.class_of == [0, 1, 2] * 3 and s.groups == ["night", "day", "dusk"]
    selection = select_heldout(s.test_cell, tasks=s.cells, n_classes=s.n_cells)
    names = list(data.group_names)
    expected = [
        int(np.sum((data.group_test == names.index(g)) & (data.y_test == c)))
        for g in s.groups
        for c in range(3)
    ]
    assert selection.totals[-1] == expected  # every cell's total is its (group, class) held-out size
    assert len(set(expected)) > 1
    # training per task: exactly its group's samples
    for k, g in enumerate(s.groups):
        assert np.array_equal(
            np.flatnonzero(s.train_task == k), np.flatnonzero(data.group_train == names.index(g))
        )


def test_counting_per_cell_bins_right_predictions_by_cell_not_by_class():
    labels = np.array([0, 1, 0, 1, 0])
    cells = np.array([0, 1, 2, 3, 2])  # samples 2 and 4 are class 0 of the second group
    rank = np.arange(5)
    counter = HeldoutCounter(labels, rank, ends=[2, 5], totals=[[1, 1, 0, 0], [1, 1, 2, 1]], cells=cells)
    assert counter.count(np.array([0, 1, 0, 0, 0]), seen_tasks=2) == ([1, 1, 2, 0], [1, 1, 2, 1])
    assert counter.count(np.array([0, 1, 0, 0, 0]), seen_tasks=1) == ([1, 1, 0, 0], [1, 1, 0, 0])


def test_staged_files_carry_no_held_out_group_or_label(tmp_path):
    _grouped_npz(tmp_path / "parts.npz")
    spec = JobSpec.parse(_job(type="ni"))
    assert spec.scenario.samples is None
    data = load_data(spec.data, tmp_path)
    s = scenario_from_spec(spec.scenario, data)
    selection = select_heldout(s.test_cell, tasks=s.cells, n_classes=s.n_cells)
    staging = stage_job(
        spec, data, s.classes, selection, tmp_path / "stage", test_cell=s.test_cell, train_task=s.train_task
    )
    folder = tmp_path / "stage"
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    assert files == [
        "data.json",
        "heldout_x.npy",
        "spec.json",
        "train_task.npy",
        "train_x.npy",
        "train_y.npy",
    ]
    info = json.loads((folder / "data.json").read_text())
    assert set(info) == {"n_classes", "tasks", "input_shape", "train"}
    assert info["tasks"] == [[0, 1, 2]] * 3 and info["n_classes"] == 3  # classes, not cells
    text = (folder / "spec.json").read_text() + (folder / "data.json").read_text()
    assert "parts.npz" not in text
    _, staged = load_staged(folder)
    assert np.array_equal(staged.train_task, s.train_task)
    # the held-out rows are the selection in an order that tells neither cell nor class ...
    heldout = staged.heldout_x
    original = np.asarray(data.x_test)[selection.indices[staging.rank]]
    assert np.array_equal(heldout, original)
    assert not np.all(np.diff(staging.cells) >= 0)
    # ... and the trusted side's key puts each staged row in its (group, class) cell
    rows = selection.indices[staging.rank]
    assert np.array_equal(staging.cells, s.test_cell[rows])
    assert np.array_equal(staging.labels, np.asarray(data.y_test)[rows])


@pytest.mark.parametrize(
    ("scenario", "message"),
    [
        pytest.param({"type": "ni", "groups": ["day", "noon"]}, "no sample group 'noon'", id="unknown-group"),
        pytest.param({"type": "ni", "n_tasks": 2}, "2 tasks but the data has 3 sample groups", id="n-tasks"),
        pytest.param(
            {"type": "nic", "groups": ["day", "night"], "classes": [[0, 1], [1]]},
            r"scenario.classes: class id\(s\) \[2\] are in no task",
            id="nic-uncovered",
        ),
        pytest.param(
            {"type": "nic", "groups": ["day", "night"], "classes": [[0, 1], [2, 5]]},
            "out of range",
            id="nic-range",
        ),
    ],
)
def test_scenario_errors_name_the_field(tmp_path, scenario, message):
    _grouped_npz(tmp_path / "parts.npz")
    spec = JobSpec.parse(_job(**scenario))
    with pytest.raises(EngineInputError, match=message):
        scenario_from_spec(spec.scenario, load_data(spec.data, tmp_path))


def test_data_without_groups_is_refused_with_the_sources(tmp_path):
    spec = JobSpec.parse({"data": {"kind": "synthetic"}, "scenario": {"type": "ni"}})
    with pytest.raises(
        EngineInputError, match=r"scenario\.type: ni needs sample groups and the data has none"
    ):
        scenario_from_spec(spec.scenario, load_data(spec.data))


def test_explicit_sample_lists_are_not_staged(tmp_path):
    data = load_data({"kind": "synthetic", "n_classes": 2, "train_per_class": 4, "test_per_class": 2})
    samples = {"a": {"train": [0, 1, 4, 5], "test": [0, 2]}, "b": {"train": [2, 3, 6, 7], "test": [1, 3]}}
    spec = JobSpec.parse({"data": "synthetic", "scenario": {"type": "ni", "samples": samples}})
    s = scenario_from_spec(spec.scenario, data)
    selection = select_heldout(s.test_cell, tasks=s.cells, n_classes=s.n_cells)
    stage_job(spec, data, s.classes, selection, tmp_path, test_cell=s.test_cell, train_task=s.train_task)
    staged_spec, _ = load_staged(tmp_path)
    assert staged_spec.scenario.samples is None and staged_spec.scenario.type == "ni"


def test_explicit_sample_lists_and_their_errors():
    data = load_data({"kind": "synthetic", "n_classes": 2, "train_per_class": 4, "test_per_class": 2})
    samples = {"a": {"train": [0, 1, 4, 5], "test": [0, 2]}, "b": {"train": [2, 3, 6, 7], "test": [1, 3]}}
    spec = JobSpec.parse({"data": "synthetic", "scenario": {"type": "ni", "samples": samples}})
    s = scenario_from_spec(spec.scenario, data)
    assert s.groups == ["a", "b"] and s.train_task.tolist() == [0, 0, 1, 1, 0, 0, 1, 1]
    assert s.test_cell.tolist() == [0, 2, 1, 3]
    bad = {"a": {"train": [0, 1], "test": [0, 9]}, "b": {"train": [1], "test": [1]}}
    spec = JobSpec.parse({"data": "synthetic", "scenario": {"type": "ni", "samples": bad}})
    with pytest.raises(
        EngineInputError, match=r"scenario.samples.a.test: position 9 beyond the test set's 4"
    ):
        scenario_from_spec(spec.scenario, data)
    bad["a"]["test"] = [0]
    spec = JobSpec.parse({"data": "synthetic", "scenario": {"type": "ni", "samples": bad}})
    with pytest.raises(EngineInputError, match=r"samples\.b\.train: sample 1 is already in group 'a'"):
        scenario_from_spec(spec.scenario, data)


def test_a_group_without_test_samples_of_a_class_is_named():
    data = load_data({"kind": "synthetic", "n_classes": 2, "train_per_class": 4, "test_per_class": 2})
    samples = {"a": {"train": [0, 4], "test": [0, 2]}, "b": {"train": [1, 5], "test": [1]}}
    spec = JobSpec.parse({"data": "synthetic", "scenario": {"type": "ni", "samples": samples}})
    with pytest.raises(EngineInputError, match=r"task 2 \(group 'b'\) has no test sample of class '1'"):
        scenario_from_spec(spec.scenario, data)


def test_digits_shift_is_deterministic_and_shifts_only_later_groups():
    a = shift_digits(load_digits(), type="brightness", groups=3, seed=1)
    b = shift_digits(load_digits(), type="brightness", groups=3, seed=1)
    assert np.array_equal(a.x_train, b.x_train) and np.array_equal(a.group_test, b.group_test)
    assert a.group_names == ["bright100", "bright75", "bright50"]
    plain = load_digits()
    g = a.group_train
    assert np.allclose(a.x_train[g == 0], plain.x_train[g == 0])
    assert np.allclose(a.x_train[g == 2], plain.x_train[g == 2] * 0.5)
    for c in range(10):  # every group holds every class
        assert {int(x) for x in g[plain.y_train == c]} == {0, 1, 2}


def test_grouped_image_folder_reads_groups(tmp_path):
    from PIL import Image

    for split in ("train", "test"):
        for group in ("cam1", "cam2"):
            for cls in ("ok", "scratch"):
                folder = tmp_path / "imgs" / split / group / cls
                folder.mkdir(parents=True)
                for i in range(2):
                    Image.new("L", (4, 4), color=40 * i).save(folder / f"{i}.png")
    data = load_data(
        {"kind": "image_folder", "path": str(tmp_path / "imgs"), "grouped": True, "size": (4, 4)}
    )
    assert data.class_names == ["ok", "scratch"] and data.group_names == ["cam1", "cam2"]
    assert data.group_test.tolist() == [0, 0, 0, 0, 1, 1, 1, 1] and data.y_test.tolist() == [0, 0, 1, 1] * 2


# ---------------------------------------------------------------------- end to end, through the CLI
POLICY = """\
format: clgate.policy/v1
name: ni-floor
rules:
  - {metric: acc, floor: 0.5}
  - {classes: "*", at: final, floor: 0.05, severity: warn}
"""


@pytest.mark.slow
def test_ni_run_metrics_gate_report_through_the_cli(tmp_path):
    _grouped_npz(tmp_path / "parts.npz")
    (tmp_path / "job.yaml").write_text(json.dumps(_job(type="ni")))
    (tmp_path / "policy.yaml").write_text(POLICY)
    run = run_clgate("run", "job.yaml", "-o", "out", "-q", cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr
    log = load_log(tmp_path / "out" / "log-seed0.json")
    assert log.scenario == "ni" and log.groups == ["day", "dusk", "night"]
    assert log.class_names == ["bolt", "nut", "washer"] and log.class_of == [0, 1, 2] * 3
    assert log.meta["scenario"] == {"type": "ni", "groups": ["day", "dusk", "night"]}
    data = load_data({"kind": "npz", "path": str(tmp_path / "parts.npz"), "groups": "lighting"})
    last = log.points[-1]
    sizes = [int(np.sum((data.group_test == g) & (data.y_test == c))) for g in range(3) for c in range(3)]
    assert last.total == sizes
    metrics = run_clgate("metrics", "out/log-seed0.json", "--json", cwd=tmp_path)
    assert metrics.returncode == 0, metrics.stderr
    result = json.loads(metrics.stdout)
    assert result["metrics"]["raa"] == result["metrics"]["acc"]  # C_k = 3 classes at every task
    assert [c["name"] for c in result["classes"]][:4] == [
        "bolt @ day",
        "nut @ day",
        "washer @ day",
        "bolt @ dusk",
    ]
    gate = run_clgate("gate", "out/log-seed0.json", "-p", "policy.yaml", "-o", "report", cwd=tmp_path)
    assert gate.returncode in (0, 1), gate.stderr
    assert "washer @ night" in (tmp_path / "report" / "report.md").read_text()


@pytest.mark.slow
def test_nic_job_through_gate_job(tmp_path):
    _grouped_npz(tmp_path / "parts.npz")
    job = _job(type="nic", groups=["day", "night", "day"], classes=[[0, 1], [0, 1, 2], [2]])
    (tmp_path / "job.yaml").write_text(json.dumps(job))
    (tmp_path / "policy.yaml").write_text(POLICY)
    gate = run_clgate(
        "gate", "--job", "job.yaml", "-p", "policy.yaml", "-o", "report", cwd=tmp_path, timeout=300
    )
    assert gate.returncode in (0, 1), gate.stderr
    (path,) = sorted((tmp_path / "report").rglob("log-seed0.json")) or sorted(
        tmp_path.rglob("log-seed0.json")
    )
    log = load_log(path)
    assert log.scenario == "nic" and log.groups == ["day", "night", "day"]
    assert log.tasks == [[0, 1], [2, 3, 4], [5]] and log.class_of == [0, 1, 0, 1, 2, 2]
    metrics = json.loads((tmp_path / "report" / "metrics.json").read_text())["runs"]["metrics"]
    acc, raa = metrics["acc"], metrics["raa"]
    # C_k = 2, 3, 3 distinct classes (not 2, 5, 6 cells)
    assert raa == pytest.approx([acc[0] * 2 / 3, acc[1], acc[2]])
    assert "washer @ day" in (tmp_path / "report" / "report.md").read_text()


@pytest.mark.slow
def test_the_service_runs_an_ni_job_on_the_same_engine_path(api):
    import time

    admin = api.as_role("admin")
    api.post("/v1/policies", json={"name": "p", "rules": [{"metric": "acc", "floor": 0.1}]}, headers=admin)
    spec = {
        "data": {"kind": "digits", "shift": {"type": "brightness", "groups": 2}},
        "scenario": {"type": "ni"},
        "model": {"arch": "mlp", "hidden": 32},
        "training": {"iterations": 5},
        "evaluation": {"eval_every": None},
    }
    body = {"mode": "retrain", "model_name": "ni", "spec": spec, "policy": {"name": "p", "version": "1"}}
    r = api.post("/v1/jobs", json=body, headers=admin)
    assert r.status_code == 202, r.text
    deadline = time.monotonic() + 240
    while (job := api.get(f"/v1/jobs/{r.json()['id']}", headers=admin).json())["state"] not in (
        "succeeded",
        "failed",
        "cancelled",
    ):
        assert time.monotonic() < deadline, job
        time.sleep(0.3)
    assert job["state"] == "succeeded", job
    from clgate.schemas.evaluation_log import EvaluationLog

    log = EvaluationLog.parse(api.get(f"/v1/jobs/{job['id']}/results/log", headers=admin).content)
    assert log.scenario == "ni" and log.groups == ["bright100", "bright75"] and log.n_classes == 20
    md = api.get(f"/v1/jobs/{job['id']}/results/report.md", headers=admin).text
    assert "@ bright75" in md


@pytest.mark.slow
def test_nic_with_a_growing_head_future_tasks_and_a_subsample(tmp_path):
    from clgate.engine import run_job

    _grouped_npz(tmp_path / "parts.npz")
    job = _job(type="nic", groups=["day", "night"], classes=[[0, 1], [1, 2]])
    job["model"]["head"] = "growing"
    job["evaluation"] = {"eval_every": None, "future_tasks": True, "subsample_per_task": 4}
    spec = JobSpec.parse(job)
    (path,) = run_job(spec, tmp_path / "out", base_dir=tmp_path)
    log = load_log(path)
    assert log.class_of == [0, 1, 1, 2] and log.tasks == [[0, 1], [2, 3]]
    first, last = log.points
    assert sum(first.total) == sum(last.total) == 8  # 4 per task, future task evaluated at task 1's end
    assert all(t > 0 for t in first.total)
    # the growing head had rows for classes 0, 1 only during task 1: class 2 is never predicted there
    assert first.correct[3] == 0
    params = [r.model_params for r in log.resources]
    assert params[1] > params[0]  # class 2's row came with task 2


def test_group_arrays_change_the_data_digest_of_group_jobs_only(tmp_path):
    _grouped_npz(tmp_path / "parts.npz")
    data = load_data({"kind": "npz", "path": str(tmp_path / "parts.npz"), "groups": "lighting"})
    plain = load_data({"kind": "npz", "path": str(tmp_path / "parts.npz"), "groups": "absent"})
    assert not plain.has_groups and data.has_groups
    assert data.digest(groups=False) == plain.digest()  # an NC job on the same file: the digest as before
    assert data.digest() != plain.digest()
