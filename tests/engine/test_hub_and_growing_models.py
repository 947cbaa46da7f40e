"""Models real users bring: a head that grows with the classes, torchvision/timm architectures by name."""

from __future__ import annotations

import pytest
import torch

from clgate.engine import run_job
from clgate.engine.errors import ModelError
from clgate.engine.models import GrowingLinear, build_model, grow_head, make_growing_head
from clgate.schemas.evaluation_log import EvaluationLog


def test_growing_head_parameters_grow_with_the_tasks(tmp_path, synthetic_spec):
    spec = synthetic_spec(**{"model.head": "growing", "training.save_final": True})
    (path,) = run_job(spec, tmp_path / "run")
    log = EvaluationLog.load(path)
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
    assert EvaluationLog.load(ev).points[-1].correct == log.points[-1].correct


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


def _torchvision_usable() -> bool:
    try:
        import torchvision.models  # noqa: F401
    except Exception:  # not installed, or a build that does not match the installed torch
        return False
    return True


@pytest.mark.skipif(
    not _torchvision_usable(), reason="torchvision not installed or not loadable with this torch"
)
def test_torchvision_model_retrained_and_evaluated(tmp_path):
    import numpy as np
    from safetensors.torch import save_file

    from clgate.schemas.job import JobSpec

    rng = np.random.default_rng(0)
    x = rng.integers(0, 255, size=(24, 3, 16, 16), dtype=np.uint8)
    y = np.repeat(np.arange(4), 6)
    np.savez(tmp_path / "d.npz", x_train=x, y_train=y, x_test=x[::2], y_test=y[::2])
    base = {
        "data": {"kind": "npz", "path": str(tmp_path / "d.npz")},
        "scenario": {"n_tasks": 2},
        "model": {"arch": "torchvision:resnet18"},
        "training": {"batch_size": 8, "iterations": 2, "save_final": True},
        "evaluation": {"eval_every": 1},
        "device": "cpu",
    }
    (path,) = run_job(JobSpec.model_validate(base), tmp_path / "run")
    log = EvaluationLog.load(path)
    assert log.meta["model"] == "torchvision:resnet18" and len(log.points) == 4
    # its weights (torchvision's own keys) evaluate as checkpoints of the same architecture
    model = build_model("torchvision:resnet18", (3, 16, 16), 4)
    save_file(model.state_dict(), str(tmp_path / "w.safetensors"))
    spec = JobSpec.model_validate(
        base | {"mode": "evaluate", "checkpoints": [str(tmp_path / "w.safetensors")] * 2}
    )
    (ev,) = run_job(spec, tmp_path / "ev")
    assert EvaluationLog.load(ev).points[-1].total == [3, 3, 3, 3]


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
