"""Models real users bring: a head that grows with the classes, torchvision/timm architectures by name."""

from __future__ import annotations

import hashlib
import importlib.abc
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from clgate.documents import load_log
from clgate.engine import run_job
from clgate.engine.errors import ModelError
from clgate.engine.models import GrowingLinear, build_model, grow_head, make_growing_head
from clgate.schemas.job import JobSpec


def test_growing_head_parameters_grow_with_the_tasks(tmp_path, synthetic_spec):
    spec = synthetic_spec(**{"model.head": "growing", "training.save_final": True})
    (path,) = run_job(spec, tmp_path / "run")
    log = load_log(path)
    hidden, n_features = 32, 8
    body = n_features * hidden + hidden + hidden * hidden + hidden
    # 6 classes in 3 tasks of 2: each task adds 2 rows of (hidden + 1) parameters
    assert [r.model_params for r in log.resources] == [body + 2 * (hidden + 1) * k for k in (1, 2, 3)]
    assert log.meta["head"] == "growing"
    per_sample = [r.ops_pass / r.train_bytes for r in log.resources]  # equal task sizes: the head grows
    assert per_sample[0] < per_sample[1] < per_sample[2]
    assert sum(log.points[-1].correct) > 0
    # the final weights evaluate as a checkpoint of the last task: the same counts as the run's end
    final = tmp_path / "run" / log.meta["final_model"]
    cks = [f"{final}@1:1", f"{final}@2:2", f"{final}@3:3"]
    (ev,) = run_job(
        synthetic_spec(**{"mode": "evaluate", "checkpoints": cks, "model.head": "growing"}), tmp_path / "ev"
    )
    assert load_log(ev).points[-1].correct == log.points[-1].correct


def test_growing_linear_outputs_only_grown_classes():
    torch.manual_seed(0)
    model = make_growing_head(build_model("mlp", (4,), 5, hidden=8), 5)
    x = torch.randn(3, 4)
    assert torch.isinf(model(x)).all()
    grow_head(model, [3, 1])
    out = model(x)
    assert torch.isfinite(out[:, [1, 3]]).all() and torch.isinf(out[:, [0, 2, 4]]).all()
    grow_head(model, [1])  # already there: nothing added
    assert len(next(m for m in model.modules() if isinstance(m, GrowingLinear)).blocks) == 1
    with pytest.raises(ModelError, match=r"final nn.Linear with 7 outputs"):
        make_growing_head(build_model("mlp", (4,), 5, hidden=8), 7)


# ---------------------------------------------------------------------- torchvision and timm
# The torchvision_models / timm_models fixtures (tests/fixtures/engine.py) import the libraries; the
# models themselves are always built by clgate from model.arch, as a user's job would.
def _images(path: Path, shape: tuple[int, ...] = (3, 16, 16), n_classes: int = 4) -> Path:
    """Float images in [0, 1] whose class sets their brightness (learnable in a few steps); the test
    split is every other training sample. Float32, so the model sees them unscaled."""
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(n_classes), 6)
    level = (y / n_classes).reshape(-1, *[1] * len(shape))
    x = (0.5 * rng.random((len(y), *shape)) + 0.5 * level).astype(np.float32)
    np.savez(path, x_train=x, y_train=y, x_test=x[::2], y_test=y[::2])
    return path


def _job(data: Path, arch: str, **changes: Any) -> JobSpec:
    spec: dict[str, Any] = {
        "data": {"kind": "npz", "path": str(data)},
        "scenario": {"n_tasks": 2},
        "model": {"arch": arch},
        "training": {"batch_size": 8, "iterations": 2, "save_final": True},
        "evaluation": {"eval_every": 1},
        "device": "cpu",
    }
    return JobSpec.model_validate(spec).with_overrides(changes) if changes else JobSpec.model_validate(spec)


def _counts(model: torch.nn.Module, data: Path, seen: list[int]) -> list[int]:
    """Correct test predictions per class of a direct forward, over the ``seen`` classes' outputs."""
    test = np.load(data)
    model.eval()
    with torch.no_grad():
        logits = model(torch.from_numpy(test["x_test"]))
    mask = torch.full((logits.shape[1],), float("-inf"))
    mask[seen] = 0
    pred = (logits + mask).argmax(1).numpy()
    y = test["y_test"]
    return [int(((pred == y) & (y == c)).sum()) if c in seen else 0 for c in range(logits.shape[1])]


def test_torchvision_model_retrained_and_evaluated(tmp_path, torchvision_models):
    data = _images(tmp_path / "d.npz")
    (path,) = run_job(_job(data, "torchvision:resnet18"), tmp_path / "run")
    log = load_log(path)
    assert log.meta["model"] == "torchvision:resnet18" and len(log.points) == 4
    assert log.tasks == [[0, 1], [2, 3]]
    # the trained weights (torchvision's own keys) evaluate as checkpoints of the same architecture,
    # with the run's own result at its end
    final = tmp_path / "run" / log.meta["final_model"]
    assert {"fc.weight", "layer4.1.bn2.running_mean"} <= set(load_file(str(final)))
    spec = _job(data, "torchvision:resnet18", mode="evaluate", checkpoints=[str(final)] * 2)
    (ev,) = run_job(spec, tmp_path / "ev")
    end = load_log(ev).points[-1]
    assert end.total == [3, 3, 3, 3] and end.correct == log.points[-1].correct


def test_torchvision_weights_in_its_own_keys_are_the_ones_evaluated(tmp_path, torchvision_models):
    """model.weights and evaluate-mode checkpoints hold torchvision's own state dict, and the counts
    clgate records are those of a direct forward of that very model."""
    data = _images(tmp_path / "d.npz")
    train = np.load(data)
    torch.manual_seed(0)
    model = torchvision_models.resnet18(num_classes=4).eval()  # built by torchvision itself, not clgate
    # weights that tell the classes apart: the final layer fitted (ridge regression) to the random body
    fc, model.fc = model.fc, torch.nn.Identity()
    with torch.no_grad():
        f = model(torch.from_numpy(train["x_train"])).double()
        gram = f @ f.T
        targets = torch.nn.functional.one_hot(torch.from_numpy(train["y_train"]), 4).double()
        w = f.T @ torch.linalg.solve(gram + 1e-6 * gram.trace() * torch.eye(len(f)), targets)
        fc.weight.copy_(w.T)
        fc.bias.zero_()
    model.fc = fc
    weights = tmp_path / "resnet18.safetensors"
    save_file(model.state_dict(), str(weights))
    first, both = _counts(model, data, [0, 1]), _counts(model, data, [0, 1, 2, 3])
    assert both == [3, 3, 3, 3]  # all right, where a freshly initialised model gets about one in four

    checkpoints = [str(weights)] * 2  # one per task end
    (ev,) = run_job(
        _job(data, "torchvision:resnet18", mode="evaluate", checkpoints=checkpoints), tmp_path / "ev"
    )
    assert [p.correct for p in load_log(ev).points] == [first, both]

    # retraining from them: with first_task_learned, task 1's end point is the loaded model, untrained
    changes = {"model.weights": str(weights), "scenario.first_task_learned": True}
    (path,) = run_job(_job(data, "torchvision:resnet18", **changes), tmp_path / "run")
    log = load_log(path)
    assert log.points[0].iteration == 0 and log.points[0].task_end and log.points[0].correct == first
    assert log.meta["model_sha256"] == hashlib.sha256(weights.read_bytes()).hexdigest()


@pytest.mark.parametrize("shape", [(1, 16, 16), (16, 16)], ids=["N1HW", "NHW"])
def test_torchvision_model_repeats_grayscale_to_three_channels(tmp_path, torchvision_models, shape):
    model = build_model("torchvision:resnet18", shape, 4).eval()
    x = torch.rand(2, *shape)
    rgb = x.reshape(2, 1, 16, 16).expand(-1, 3, -1, -1)
    with torch.no_grad():
        assert torch.equal(model(x), model.forward(rgb))  # forward() skips the pre-hook
    (path,) = run_job(_job(_images(tmp_path / "d.npz", shape), "torchvision:resnet18"), tmp_path / "run")
    assert load_log(path).points[-1].total == [3, 3, 3, 3]
    with pytest.raises(ModelError, match=r"RGB \(3-channel\) or grayscale"):
        build_model("torchvision:resnet18", (2, 16, 16), 4)


def test_torchvision_model_with_a_growing_head(tmp_path, torchvision_models):
    data = _images(tmp_path / "d.npz")
    growing = {"model.head": "growing"}
    (path,) = run_job(_job(data, "torchvision:resnet18", **growing), tmp_path / "run")
    log = load_log(path)
    assert log.meta["head"] == "growing"
    body = sum(p.numel() for p in torchvision_models.resnet18(num_classes=4).parameters()) - (512 + 1) * 4
    assert [r.model_params for r in log.resources] == [body + 2 * (512 + 1) * k for k in (1, 2)]
    final = tmp_path / "run" / log.meta["final_model"]
    assert {"fc.blocks.0.weight", "fc.blocks.1.weight", "fc.classes"} <= set(load_file(str(final)))
    spec = _job(data, "torchvision:resnet18", mode="evaluate", checkpoints=[str(final)] * 2, **growing)
    (ev,) = run_job(spec, tmp_path / "ev")
    assert load_log(ev).points[-1].correct == log.points[-1].correct


def test_timm_model_retrained_and_evaluated(tmp_path, timm_models):
    data = _images(tmp_path / "d.npz", (1, 16, 16))  # grayscale: timm builds the stem with in_chans=1
    (path,) = run_job(_job(data, "timm:resnet10t"), tmp_path / "run")
    log = load_log(path)
    assert log.meta["model"] == "timm:resnet10t" and len(log.points) == 4
    final = tmp_path / "run" / log.meta["final_model"]
    assert load_file(str(final))["conv1.0.weight"].shape[1] == 1  # timm's own keys, one input channel
    spec = _job(data, "timm:resnet10t", mode="evaluate", checkpoints=[str(final)] * 2)
    (ev,) = run_job(spec, tmp_path / "ev")
    end = load_log(ev).points[-1]
    assert end.total == [3, 3, 3, 3] and end.correct == log.points[-1].correct
    with pytest.raises(ModelError, match="timm cannot build 'no_such_model'"):
        build_model("timm:no_such_model", (1, 16, 16), 4)


class _BrokenBuild(importlib.abc.MetaPathFinder):
    """Makes imports of torchvision and timm fail the way a torchvision built for another torch does."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> None:
        if fullname.partition(".")[0] in ("torchvision", "timm"):
            raise self.exc
        return None


@pytest.mark.parametrize("arch", ["torchvision:resnet18", "timm:resnet10t"])
@pytest.mark.parametrize(
    "exc",
    [RuntimeError("operator torchvision::nms does not exist"), OSError("libc10_cuda.so: cannot open")],
    ids=["ops", "library"],
)
def test_mismatched_torchvision_build_is_a_clear_model_error(monkeypatch, arch, exc):
    for name in [n for n in sys.modules if n.partition(".")[0] in ("torchvision", "timm")]:
        monkeypatch.delitem(sys.modules, name)  # put back after the test
    monkeypatch.setattr(sys, "meta_path", [_BrokenBuild(exc), *sys.meta_path])
    with pytest.raises(ModelError) as info:
        build_model(arch, (3, 16, 16), 4)
    message = str(info.value)
    assert message.startswith(f"model.arch: {arch}: the installed torchvision")
    assert f"does not match torch {torch.__version__}" in message and str(exc) in message
    assert f"install the torchvision build made for torch {torch.__version__}" in message
    assert "cannot build" not in message


def test_hub_architecture_names_are_validated():
    from clgate.schemas.job import JobSpec, JobSpecError

    with pytest.raises((JobSpecError, ValueError), match="torchvision:NAME"):
        JobSpec.model_validate(
            {"data": "digits", "scenario": {"n_tasks": 2}, "model": {"arch": "torchvision"}}
        )
    spec = JobSpec.model_validate(
        {"data": "digits", "scenario": {"n_tasks": 2}, "model": {"arch": "timm:resnet18"}}
    )
    assert spec.model.arch == "timm:resnet18"
    with pytest.raises(ModelError, match="needs image inputs"):
        build_model("torchvision:resnet18", (64,), 10)
