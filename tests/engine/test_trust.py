"""Issue 9 in the engine: divergence stops training, broken logits are wrong predictions, the
evaluation subsample is stratified and shared, image layouts are explicit, no batch of one reaches a
BatchNorm model, and a bad subsample size is an input error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from clgate.documents import load_log
from clgate.engine import run_job
from clgate.engine.errors import DataError, EngineInputError
from clgate.engine.evaluator import ContinualEvaluator
from clgate.engine.runner import TrainingDiverged
from clgate.metrics import compute_metrics
from clgate.policy import decide, parse_policy
from clgate.schemas.job import JobSpec

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")


def test_a_diverged_ewc_run_stops_names_task_and_iteration_and_its_log_fails(tmp_path, synthetic_spec):
    spec = synthetic_spec(**{"strategy.name": "ewc", "strategy.ewc_lambda": 1e6, "training.lr": 0.5})
    with pytest.raises(
        TrainingDiverged, match=r"training diverged at task 2, iteration \d+: loss is (nan|inf)"
    ) as err:
        run_job(spec, tmp_path)
    (path,) = err.value.paths
    log = load_log(path)
    assert log.partial and log.diverged is not None and log.diverged.task == 2
    assert log.finished_tasks == 1
    policy = parse_policy({"name": "p", "rules": [{"metric": "acc", "at": "task:1", "floor": 0.0}]})
    d = decide([log], policy)
    assert d.verdict == "FAIL" and "diverged at task 2" in d.summary


def test_non_finite_logits_are_wrong_predictions_never_class_0():
    x, y = torch.randn(6, 3), torch.tensor([0, 0, 1, 1, 2, 2])
    ev = ContinualEvaluator(x, y, tasks=[[0, 1, 2]], n_classes=3, device=torch.device("cpu"))
    model = torch.nn.Linear(3, 3)

    def nan(inp):
        return torch.full((len(inp), 3), float("nan"))

    assert ev.evaluate(nan, model, seen_tasks=1) == ([0, 0, 0], [2, 2, 2])

    def inf(inp):
        return torch.full((len(inp), 3), float("inf"))

    assert ev.evaluate(inf, model, seen_tasks=1)[0] == [0, 0, 0]

    def masked(
        inp: torch.Tensor,
    ) -> torch.Tensor:  # predict_over: seen masks with -inf: still judged
        out = torch.zeros(len(inp), 3)
        out[:, 0] = 1.0
        out[:, 2] = float("-inf")
        return out

    assert ev.evaluate(masked, model, seen_tasks=1)[0] == [2, 0, 0]


def test_the_subsample_is_stratified_and_shared_by_seeds_and_with_the_baseline(tmp_path, synthetic_spec):
    spec = synthetic_spec(**{"evaluation.subsample_per_task": 5, "seeds": [0, 1]})
    a, b = run_job(spec, tmp_path / "er")
    (base,) = run_job(
        synthetic_spec(**{"evaluation.subsample_per_task": 5, "strategy.name": "joint"}),
        tmp_path / "joint",
    )
    logs = [load_log(p) for p in (a, b, base)]
    selections = {log.meta["eval_selection"]["sha256"] for log in logs}
    assert len(selections) == 1 and logs[0].meta["eval_selection"]["stratified"]
    end = logs[0].points[-1].total
    for task in logs[0].tasks:  # 5 samples over 2 equal classes: 3 and 2, each class at least one
        assert sorted(end[c] for c in task) == [2, 3]
    assert all(log.points[-1].total == end for log in logs)
    policy = parse_policy({"name": "p", "rules": [{"baseline": "classes", "max_drop": 1.0}]})
    assert decide(logs[:2], policy, baseline=logs[2]).rules[0].status == "pass"
    (other,) = run_job(synthetic_spec(**{"evaluation.subsample_per_task": 6}), tmp_path / "other")
    refused = decide(logs[:1], policy, baseline=load_log(other))
    assert refused.verdict == "ERROR" and "other test samples" in refused.rules[0].message


def test_a_subsample_smaller_than_a_task_is_an_input_error(tmp_path, synthetic_spec):
    with pytest.raises(
        EngineInputError,
        match=r"evaluation.subsample_per_task: 1 sample\(s\) for task 1's 2 classes",
    ):
        run_job(synthetic_spec(**{"evaluation.subsample_per_task": 1}), tmp_path)


def _images(path: Path, *, last: bool, per_class: int = 9, n_classes: int = 4) -> Path:
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(n_classes), per_class)
    x = rng.random((len(y), 3, 8, 8), dtype=np.float32) + y[:, None, None, None] * 0.2
    yt = np.repeat(np.arange(n_classes), 3)
    xt = rng.random((len(yt), 3, 8, 8), dtype=np.float32) + yt[:, None, None, None] * 0.2
    if last:
        x, xt = x.transpose(0, 2, 3, 1), xt.transpose(0, 2, 3, 1)
    np.savez(path, x_train=x, y_train=y, x_test=xt, y_test=yt)
    return path


def _image_job(path: Path, arch: str, **extra: object) -> JobSpec:
    data: dict[str, object] = {"kind": "npz", "path": str(path)}
    data.update(extra.pop("data", {}))  # type: ignore[arg-type]
    return JobSpec.model_validate(
        {
            "data": data,
            "scenario": {"n_tasks": 2},
            "model": {"arch": arch},
            "training": {"batch_size": 17, "epochs": 1},
            "evaluation": {"eval_every": None},
            "device": "cpu",
            **extra,
        }
    )


def test_channels_last_images_need_the_layout_and_then_match_channels_first(tmp_path):
    last = _images(tmp_path / "last.npz", last=True)
    first = _images(tmp_path / "first.npz", last=False)
    with pytest.raises(DataError, match=r"channels last \(N, H, W, C\), but data.layout is channels_first"):
        run_job(_image_job(last, "cnn"), tmp_path / "a")
    (a,) = run_job(_image_job(last, "cnn", data={"layout": "channels_last"}), tmp_path / "b")
    (b,) = run_job(_image_job(first, "cnn"), tmp_path / "c")
    la, lb = load_log(a), load_log(b)
    assert la.points == lb.points and la.meta["data"]["sha256"] == lb.meta["data"]["sha256"]
    with pytest.raises(DataError, match="channels first"):
        run_job(_image_job(first, "cnn", data={"layout": "channels_last"}), tmp_path / "d")


def test_a_last_batch_of_one_never_reaches_batchnorm(tmp_path):
    # 2 classes × 9 samples = 18 per task, batch 17: the lone 18th sample joins the last batch
    path = _images(tmp_path / "d.npz", last=False)
    (log_path,) = run_job(_image_job(path, "resnet18-slim"), tmp_path / "out")
    log = load_log(log_path)
    assert not log.partial and log.meta["iterations_per_task"] == [1, 1]


def test_future_tasks_with_predict_over_seen_has_no_forward_transfer(tmp_path, synthetic_spec):
    (path,) = run_job(synthetic_spec(**{"evaluation.future_tasks": True}), tmp_path)
    m = compute_metrics(load_log(path))
    assert m.metrics["fwt_lifetime"] is None and "predict_over: seen" in m.reasons["fwt_lifetime"]
    (path,) = run_job(
        synthetic_spec(**{"evaluation.future_tasks": True, "model.predict_over": "all"}),
        tmp_path / "all",
    )
    assert compute_metrics(load_log(path)).metrics["fwt_lifetime"] is not None


def test_the_thread_count_is_recorded_in_the_log(tmp_path, synthetic_spec):
    (path,) = run_job(synthetic_spec(cpu_threads=1), tmp_path)
    assert load_log(path).meta["cpu_threads"] == 1
