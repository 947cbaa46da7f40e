"""``clgate evaluate`` on NI and NIC jobs: checkpoints evaluated per cell (task, class), counts equal to a
naive loop over the held-out samples, mid-task checkpoints, errors that name the field, and the reports
of the evaluated log show each class pooled over its cells."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from typer.testing import CliRunner

from clgate.cli import app
from clgate.documents import load_log
from clgate.engine.data import load_data
from clgate.engine.models import build_model
from clgate.fmt import fmt
from tests.engine.test_ni import _grouped_npz, _job

GROUPS = ["night", "day", "dusk"]  # not the data's order: the log must follow the scenario's


@pytest.fixture
def cli():
    runner = CliRunner()

    def invoke(*args: object):
        return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)

    return invoke


def _checkpoints(folder, n: int) -> list[torch.nn.Module]:
    """``n`` freshly initialised MLPs (6 inputs, 3 classes) saved as ``ck{k}.safetensors``."""
    models = []
    for k in range(n):
        torch.manual_seed(k)
        model = build_model("mlp", (6,), 3, hidden=32).eval()
        save_file(model.state_dict(), str(folder / f"ck{k}.safetensors"))
        models.append(model)
    return models


def _naive_counts(model, data, groups, seen_groups, seen_classes) -> tuple[list[int], list[int]]:
    """Correct and total per cell (task-major: cell = task · 3 + class) over the held-out samples of the
    groups seen, each predicted over the classes seen: the evaluator's job, done by hand."""
    names = list(data.group_names)
    correct, total = [0] * (3 * len(groups)), [0] * (3 * len(groups))
    with torch.no_grad():
        logits = model(torch.from_numpy(np.asarray(data.x_test, dtype=np.float32)))
    masked = torch.full_like(logits, float("-inf"))
    masked[:, seen_classes] = logits[:, seen_classes]
    preds = masked.argmax(dim=1).numpy()
    for task, group in enumerate(groups[:seen_groups]):
        rows = np.flatnonzero(np.asarray(data.group_test) == names.index(group))
        for i in rows:
            cell = 3 * task + int(data.y_test[i])
            total[cell] += 1
            correct[cell] += int(preds[i] == data.y_test[i])
    return correct, total


def test_evaluate_on_an_ni_job_counts_each_cell_like_a_naive_loop(tmp_path, cli, monkeypatch):
    _grouped_npz(tmp_path / "parts.npz")
    (tmp_path / "job.json").write_text(json.dumps(_job(type="ni", groups=GROUPS)))
    models = _checkpoints(tmp_path, 3)
    monkeypatch.chdir(tmp_path)
    result = cli(
        "evaluate",
        "-c",
        "ck0.safetensors",
        "ck1.safetensors",
        "ck2.safetensors",
        "job.json",
        "-o",
        "out",
        "-q",
    )
    assert result.exit_code == 0, result.output
    log = load_log(tmp_path / "out" / "log-seed0.json")
    assert log.scenario == "ni" and log.groups == GROUPS and log.class_of == [0, 1, 2] * 3
    assert [c for t in log.tasks for c in t] == list(range(9))
    assert log.meta["strategy"] == "evaluate" and len(log.meta["checkpoints"]) == 3
    assert [(p.iteration, p.task, p.task_end) for p in log.points] == [
        (1, 1, True),
        (2, 2, True),
        (3, 3, True),
    ]
    data = load_data({"kind": "npz", "path": str(tmp_path / "parts.npz"), "groups": "lighting"})
    for k, (point, model) in enumerate(zip(log.points, models, strict=True)):
        assert (point.correct, point.total) == _naive_counts(model, data, GROUPS, k + 1, [0, 1, 2]), k


def test_evaluate_on_a_nic_job_with_a_mid_task_checkpoint(tmp_path, cli, monkeypatch):
    _grouped_npz(tmp_path / "parts.npz")
    scenario = {"type": "nic", "groups": ["day", "night", "day"], "classes": [[0, 1], [0, 1, 2], [2]]}
    (tmp_path / "job.json").write_text(json.dumps(_job(**scenario)))
    models = _checkpoints(tmp_path, 4)
    monkeypatch.chdir(tmp_path)
    cks = ["ck0.safetensors@5:1", "ck1.safetensors@10:1", "ck2.safetensors@20:2", "ck3.safetensors@30:3"]
    result = cli("evaluate", *[a for ck in cks for a in ("-c", ck)], "job.json", "-o", "out", "-q")
    assert result.exit_code == 0, result.output
    log = load_log(tmp_path / "out" / "log-seed0.json")
    assert log.scenario == "nic" and log.tasks == [[0, 1], [2, 3, 4], [5]]
    assert log.class_of == [0, 1, 0, 1, 2, 2] and log.groups == ["day", "night", "day"]
    assert [(p.iteration, p.task, p.task_end) for p in log.points] == [
        (5, 1, False),
        (10, 1, True),
        (20, 2, True),
        (30, 3, True),
    ]
    data = load_data({"kind": "npz", "path": str(tmp_path / "parts.npz"), "groups": "lighting"})
    names = list(data.group_names)
    size = [
        int(np.sum((np.asarray(data.group_test) == names.index(g)) & (data.y_test == c)))
        for g, classes in zip(log.groups, scenario["classes"], strict=True)
        for c in classes
    ]
    assert log.points[-1].total == size  # every cell: its (group, class) held-out size
    # the mid-task point: task 1's cells only, predicted over task 1's classes (bolt, nut)
    first = log.points[0]
    assert first.total == size[:2] + [0] * 4
    with torch.no_grad():
        day = np.flatnonzero(np.asarray(data.group_test) == names.index("day"))
        day = day[np.isin(data.y_test[day], [0, 1])]
        logits = models[0](torch.from_numpy(np.asarray(data.x_test, dtype=np.float32)[day]))[:, :2]
    hits = logits.argmax(dim=1).numpy() == data.y_test[day]
    assert first.correct[:2] == [int(hits[data.y_test[day] == c].sum()) for c in (0, 1)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["-c", "ck0.safetensors", "ck1.safetensors"], "checkpoints: 2 given for 3 tasks", id="count"
        ),
        pytest.param(
            ["-c", "ck0.safetensors@5:2", "ck1.safetensors@9:1", "ck2.safetensors@12:3"],
            "checkpoints[1]: task 1 comes after task 2",
            id="order",
        ),
        pytest.param(
            ["-c", "missing.safetensors", "ck0.safetensors", "ck1.safetensors"], "no such", id="missing"
        ),
        pytest.param(
            [
                "-c",
                "ck0.safetensors",
                "ck1.safetensors",
                "ck2.safetensors",
                "scenario.groups=[day, noon, dusk]",
            ],
            "no sample group 'noon'",
            id="group",
        ),
    ],
)
def test_evaluate_errors_on_an_ni_job_name_the_field(tmp_path, cli, monkeypatch, args, message):
    _grouped_npz(tmp_path / "parts.npz")
    (tmp_path / "job.json").write_text(json.dumps(_job(type="ni", groups=GROUPS)))
    _checkpoints(tmp_path, 3)
    monkeypatch.chdir(tmp_path)
    result = cli("evaluate", *args, "job.json", "-o", "out", "-q")
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


@pytest.mark.slow
def test_a_nic_run_s_final_weights_evaluate_to_the_same_counts_and_report_pooled_classes(
    tmp_path, cli, monkeypatch
):
    """Retrain a NIC job (growing head), then `clgate evaluate` its final weights as every task end's
    checkpoint: the last point's per-cell counts equal the run's; the gate's reports pool the classes."""
    from clgate.engine import run_job
    from clgate.schemas.job import JobSpec

    _grouped_npz(tmp_path / "parts.npz")
    job = _job(type="nic", groups=["day", "night", "day"], classes=[[0, 1], [0, 1, 2], [2]])
    job["model"]["head"] = "growing"
    job["training"]["save_final"] = True
    job["evaluation"] = {"eval_every": None}
    (run,) = run_job(JobSpec.parse(job), tmp_path / "run", base_dir=tmp_path)
    trained = load_log(run)
    final = tmp_path / "run" / trained.meta["final_model"]
    (tmp_path / "job.json").write_text(json.dumps(job))
    monkeypatch.chdir(tmp_path)
    cks = [a for k in (1, 2, 3) for a in ("-c", f"{final}@{k}:{k}")]
    result = cli("evaluate", *cks, "job.json", "-o", "ev", "-q")
    assert result.exit_code == 0, result.output
    evaluated = load_log(tmp_path / "ev" / "log-seed0.json")
    assert (evaluated.tasks, evaluated.class_of) == (trained.tasks, trained.class_of)
    assert evaluated.points[-1].correct == trained.points[-1].correct
    assert evaluated.points[-1].total == trained.points[-1].total
    (tmp_path / "policy.yaml").write_text("name: floor\nrules:\n  - {metric: acc, floor: 0.1}\n")
    result = cli("gate", "ev/log-seed0.json", "-p", "policy.yaml", "-o", "report")
    assert result.exit_code in (0, 1), result.output
    assert "worst class pooled over its cells: class " in " ".join(result.output.split())
    md = (tmp_path / "report" / "report.md").read_text()
    last = evaluated.points[-1]
    for c, name in enumerate(evaluated.class_names):
        cells = [i for i, of in enumerate(evaluated.class_of) if of == c]
        correct, total = sum(last.correct[i] for i in cells), sum(last.total[i] for i in cells)
        assert f"| {name} | {fmt(correct / total)} | {correct} / {total} | 2 |" in md
