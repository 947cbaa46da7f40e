"""Hostile NI/NIC inputs: group arrays, group names, task lists, grouped image folders and the digits'
shift. Each is refused before anything runs with an error naming the field (or file) and the reason —
never a traceback, an internal error (CLI exit 3) or a silently different scenario."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from clgate.engine.data import DataLimits, load_data, load_digits, shift_digits
from clgate.engine.errors import DataError, EngineInputError
from clgate.engine.scenario import scenario_from_spec
from clgate.schemas.job import JobSpec, JobSpecError
from tests.fixtures.cli import run_clgate


def _npz(path: Path, group_train: object, group_test: object, *, n_train: int = 8, n_test: int = 4) -> Path:
    """Two classes (alternating labels) with the given group arrays (anything: they are the attack)."""
    rng = np.random.default_rng(0)
    arrays = {
        "x_train": rng.normal(size=(n_train, 3)).astype(np.float32),
        "y_train": np.arange(n_train) % 2,
        "x_test": rng.normal(size=(n_test, 3)).astype(np.float32),
        "y_test": np.arange(n_test) % 2,
        "group_train": group_train,
        "group_test": group_test,
    }
    np.savez(path, **arrays)
    return path


def _named(train: list[str], test: list[str]) -> tuple[np.ndarray, np.ndarray]:
    return np.array(train), np.array(test)


G_TRAIN, G_TEST = np.repeat([0, 1], 4), np.repeat([0, 1], 2)


# ---------------------------------------------------------------------- NPZ group arrays
@pytest.mark.parametrize(
    ("group_train", "message"),
    [
        pytest.param(np.array(3), r"group_train must be a 1-D array .* got int64 \(\)", id="0-d"),
        pytest.param(G_TRAIN.reshape(4, 2), r"group_train must be a 1-D array .* \(4, 2\)", id="2-d"),
        pytest.param(G_TRAIN[:5], r"group_train has 5 entries for the train set's 8 samples", id="short"),
    ],
)
def test_group_arrays_of_the_wrong_shape_are_refused_naming_the_array(tmp_path, group_train, message):
    path = _npz(tmp_path / "g.npz", group_train, G_TEST)
    with pytest.raises(DataError, match=message):
        load_data({"kind": "npz", "path": str(path)})


def test_byte_string_groups_are_named_as_text(tmp_path):
    path = _npz(tmp_path / "g.npz", G_TRAIN.astype("S1"), G_TEST.astype("S1"))
    data = load_data({"kind": "npz", "path": str(path)})
    assert data.group_names == ["0", "1"]  # not "b'0'", which no scenario.groups could name


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param("b@x", id="at"),
        pytest.param("", id="empty"),
        pytest.param(" night", id="spaces"),
        pytest.param("a\nb", id="newline"),
        pytest.param("a\x1b[31m", id="escape"),
        pytest.param("g" * 65, id="long"),
    ],
)
def test_group_names_in_the_data_follow_the_specs_rule(tmp_path, bad):
    train, test = _named([bad] * 4 + ["day"] * 4, [bad] * 2 + ["day"] * 2)
    path = _npz(tmp_path / "g.npz", train, test)
    with pytest.raises(DataError, match=r"group_train: .* is not a group name \(1 to 64 characters"):
        load_data({"kind": "npz", "path": str(path)})


def test_control_characters_in_the_specs_group_names_are_refused():
    for scenario in ({"type": "ni", "groups": ["a\tb"]}, {"type": "ni", "samples": {"a\x00": {}}}):
        with pytest.raises(JobSpecError, match=r"is not a group name .*control characters"):
            JobSpec.parse({"data": "synthetic", "scenario": scenario})


def test_integer_group_ids_may_be_written_as_numbers(tmp_path):
    """An NPZ's integer groups are named "0", "1": YAML's ``groups: [1, 0]`` names them."""
    path = _npz(tmp_path / "g.npz", G_TRAIN, G_TEST)
    spec = JobSpec.parse(
        {"data": {"kind": "npz", "path": str(path)}, "scenario": {"type": "ni", "groups": [1, 0]}}
    )
    assert scenario_from_spec(spec.scenario, load_data(spec.data)).groups == ["1", "0"]
    with pytest.raises(JobSpecError, match=r"scenario.groups\[0\]: Input should be a valid string"):
        JobSpec.parse({"data": "digits", "scenario": {"type": "ni", "groups": [True]}})  # YAML's on


# ---------------------------------------------------------------------- task lists and sample lists
@pytest.mark.parametrize(
    ("scenario", "message"),
    [
        pytest.param({"type": "ni", "groups": []}, r"groups: at least one group", id="ni-groups"),
        pytest.param(
            {"type": "nic", "groups": [], "classes": []}, r"groups: at least one group", id="nic-groups"
        ),
        pytest.param({"type": "ni", "samples": {}}, r"samples: at least one group", id="samples"),
    ],
)
def test_a_scenario_without_tasks_is_refused_by_the_spec(scenario, message):
    with pytest.raises(JobSpecError, match=message):
        JobSpec.parse({"data": "synthetic", "scenario": scenario})


def test_sample_positions_beyond_any_index_are_refused_naming_the_list():
    data = load_data({"kind": "synthetic", "n_classes": 2, "train_per_class": 4, "test_per_class": 2})
    samples = {"a": {"train": [0, 10**20], "test": [0]}}
    spec = JobSpec.parse({"data": "synthetic", "scenario": {"type": "ni", "samples": samples}})
    with pytest.raises(EngineInputError, match=r"scenario.samples.a.train: position 10{20} beyond"):
        scenario_from_spec(spec.scenario, data)


def test_nic_validation_is_linear_in_the_number_of_tasks():
    """A 1 MiB API body holds ~80 000 NIC tasks; validating them must not hold the API for minutes."""
    n = 40_000
    scenario = {"type": "nic", "groups": [f"g{i}" for i in range(n)], "classes": [[0]] * n}
    start = time.perf_counter()
    JobSpec.parse({"data": "synthetic", "scenario": scenario})
    assert time.perf_counter() - start < 5  # quadratic: about a minute
    scenario["groups"][-1] = "g0"
    with pytest.raises(JobSpecError, match=rf"classes\[{n - 1}\]: group 'g0' already brought .* task 1"):
        JobSpec.parse({"data": "synthetic", "scenario": scenario})


def test_errors_about_many_groups_stay_short(tmp_path):
    g = np.repeat(np.arange(1000), 2)
    path = _npz(tmp_path / "g.npz", g, g, n_train=2000, n_test=2000)
    data = load_data({"kind": "npz", "path": str(path)})
    for scenario in ({"type": "ni", "groups": ["nope"]}, {"type": "ni", "n_tasks": 3}):
        spec = JobSpec.parse({"data": "synthetic", "scenario": scenario})
        with pytest.raises(EngineInputError) as err:
            scenario_from_spec(spec.scenario, data)
        assert len(str(err.value)) < 400 and "1000 in all" in str(err.value), str(err.value)


# ---------------------------------------------------------------------- the digits' shift
def test_small_brightness_steps_still_give_each_task_its_own_group():
    data = shift_digits(load_digits(), type="brightness", groups=3, step=0.001)
    assert len(set(data.group_names)) == 3, data.group_names
    spec = JobSpec.parse({"data": "digits", "scenario": {"type": "ni"}})
    s = scenario_from_spec(spec.scenario, data)
    assert np.bincount(s.train_task[s.train_task >= 0]).min() > 0  # every task has training samples
    assert np.bincount(s.test_cell[s.test_cell >= 0], minlength=30).min() > 0  # every cell is evaluated
    default = shift_digits(load_digits(), type="brightness", groups=3)
    assert default.group_names == ["bright100", "bright75", "bright50"]  # the documented names stand


@pytest.mark.parametrize(
    ("shift", "message"),
    [
        pytest.param({"type": "rotation", "step": 1e308}, r"data.shift: .*step: at most 360", id="huge-step"),
        pytest.param({"type": "rotation", "seed": -1}, r"data.shift.seed: .*greater than or equal to 0"),
    ],
)
def test_digits_shift_values_that_cannot_run_are_refused_by_the_spec(shift, message):
    with pytest.raises(JobSpecError, match=message):
        JobSpec.parse({"data": {"kind": "digits", "shift": shift}, "scenario": {"type": "ni"}})


# ---------------------------------------------------------------------- grouped image folders
def _folder(root: Path, groups: dict[str, dict[str, tuple[str, ...]]], n: int = 2) -> Path:
    """``root/<split>/<group>/<class>/<i>.png``; ``groups``: split → group → its classes."""
    from PIL import Image

    for split, of_split in groups.items():
        for group, classes in of_split.items():
            for cls in classes:
                folder = root / split / group / cls
                folder.mkdir(parents=True)
                for i in range(n):
                    Image.new("L", (4, 4), color=50 * i).save(folder / f"{i}.png")
    return root


TWO = {"cam1": ("ok", "scratch"), "cam2": ("ok", "scratch")}


def _load_grouped(root: Path):
    return load_data({"kind": "image_folder", "path": str(root), "grouped": True, "size": (4, 4)})


def test_grouped_image_folders_are_held_to_the_data_limits(tmp_path):
    root = _folder(tmp_path / "imgs", {"train": TWO, "test": TWO})  # 16 images
    spec = {"kind": "image_folder", "path": str(root), "grouped": True, "size": (4, 4)}
    problems = DataLimits(max_samples=10).problems(spec, None)
    assert problems and "16 images, more than 10 (CLGATE_MAX_SAMPLES)" in problems[0]
    assert DataLimits(max_samples=16).problems(spec, None) == []


def test_a_group_only_in_test_is_refused(tmp_path):
    root = _folder(tmp_path / "imgs", {"train": TWO, "test": {**TWO, "cam3": ("ok",)}})
    with pytest.raises(DataError, match=r"group\(s\) cam3 are in test/ but not in train/"):
        _load_grouped(root)


def test_a_class_folder_without_images_names_the_layout(tmp_path):
    root = _folder(tmp_path / "imgs", {"train": TWO, "test": TWO})
    for png in sorted(root.glob("train/cam1/ok/*.png")):  # one level too deep
        (png.parent / "more").mkdir(exist_ok=True)
        png.rename(png.parent / "more" / png.name)
    with pytest.raises(DataError, match=r"train/cam1/ok: no image files .*<group>/<class>/<image files>"):
        _load_grouped(root)


def test_a_flat_folder_read_as_grouped_says_so(tmp_path):
    from PIL import Image

    for split in ("train", "test"):
        for cls in ("ok", "scratch"):
            (tmp_path / split / cls).mkdir(parents=True)
            Image.new("L", (4, 4)).save(tmp_path / split / cls / "0.png")
    with pytest.raises(DataError, match=r"train/ok: no class folders .*grouped: false"):
        _load_grouped(tmp_path)


@pytest.mark.parametrize("bad", ["b@x", " cam", "g" * 65])
def test_group_folder_names_follow_the_specs_rule(tmp_path, bad):
    root = _folder(tmp_path / "imgs", {s: {bad: ("ok",), "cam2": ("ok",)} for s in ("train", "test")})
    with pytest.raises(DataError, match=r"is not a group name"):
        _load_grouped(root)


# ---------------------------------------------------------------------- through the CLI and the API
def test_the_cli_answers_bad_groups_with_exit_2(tmp_path):
    _npz(tmp_path / "g.npz", np.array(3), G_TEST)
    job = {
        "data": {"kind": "npz", "path": "g.npz"},
        "scenario": {"type": "ni", "samples": {"a": {"train": [10**20]}}},
        "model": {"arch": "mlp", "hidden": 8},
        "device": "cpu",
    }
    (tmp_path / "job.json").write_text(json.dumps(job))
    run = run_clgate("run", "job.json", "-o", "out", "-q", cwd=tmp_path)
    assert run.returncode == 2 and "group_train must be a 1-D array" in run.stderr, run.stderr
    job["data"] = "synthetic"
    (tmp_path / "job.json").write_text(json.dumps(job))
    run = run_clgate("run", "job.json", "-o", "out", "-q", cwd=tmp_path)
    assert run.returncode == 2 and "scenario.samples.a.train: position" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr


def test_the_api_refuses_an_empty_task_list_with_422(api):
    api.post(
        "/v1/policies",
        json={"name": "p", "version": "1", "rules": [{"metric": "acc", "floor": 0.0}]},
        headers=api.as_role("approver"),
    ).raise_for_status()
    spec = {"data": "digits", "scenario": {"type": "ni", "groups": []}, "device": "cpu"}
    body = {"mode": "retrain", "model_name": "m", "spec": spec, "policy": {"name": "p", "version": "1"}}
    r = api.post("/v1/jobs", json=body, headers=api.as_role("submitter"))
    assert r.status_code == 422, r.text
    assert "groups: at least one group" in " ".join(r.json()["problems"]), r.json()


# `clgate gate --job` runs the job as `clgate run` does: an input error is exit 2, the data within limits.
def test_gate_job_answers_a_scenario_error_with_exit_2(tmp_path):
    _npz(tmp_path / "g.npz", G_TRAIN, G_TEST)
    job = {
        "data": {"kind": "npz", "path": "g.npz"},
        "scenario": {"type": "nic", "groups": ["0", "1"], "classes": [[0], [0]]},  # class 1 in no task
        "model": {"arch": "mlp", "hidden": 8},
        "device": "cpu",
    }
    (tmp_path / "job.json").write_text(json.dumps(job))
    (tmp_path / "policy.yaml").write_text(
        "format: clgate.policy/v1\nname: p\nrules:\n  - {metric: acc, floor: 0}\n"
    )
    gate = run_clgate("gate", "--job", "job.json", "-p", "policy.yaml", "-o", "report", cwd=tmp_path)
    assert gate.returncode == 2, gate.stderr
    assert "scenario.classes: class id(s) [1] are in no task" in gate.stderr


def test_gate_job_holds_the_data_to_the_limits(tmp_path):
    _npz(tmp_path / "g.npz", G_TRAIN, G_TEST)
    job = {"data": {"kind": "npz", "path": "g.npz"}, "scenario": {"type": "ni"}, "device": "cpu"}
    job |= {"model": {"arch": "mlp", "hidden": 8}, "training": {"iterations": 1}}
    (tmp_path / "job.json").write_text(json.dumps(job))
    (tmp_path / "policy.yaml").write_text(
        "format: clgate.policy/v1\nname: p\nrules:\n  - {metric: acc, floor: 0}\n"
    )
    env = {"CLGATE_MAX_SAMPLES": "3"}
    gate = run_clgate("gate", "--job", "job.json", "-p", "policy.yaml", "-o", "report", cwd=tmp_path, env=env)
    assert gate.returncode == 2 and "CLGATE_MAX_SAMPLES" in gate.stderr, gate.stderr
