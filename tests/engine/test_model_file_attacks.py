"""Loading a model file runs no code from it: hostile ``.pt2`` and TorchScript files are refused from their
content, before torch opens them, with the member named; honest files of every built-in architecture load
and predict exactly like the model they were saved from.

Each attack is first shown to be live (loaded by torch directly, it creates its marker file), so the
refusal tests can fail.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from clgate.engine import run_job
from clgate.engine.errors import ModelError
from clgate.engine.models import build_model, load_exported, load_torchscript
from tests.fixtures.model_attacks import (
    ATTACKS,
    N_CLASSES,
    N_FEATURES,
    build_attack,
    expected_member,
    export_program,
)

pytestmark = [
    pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]


def _load_with_torch(name: str, path) -> None:
    """What torch does with the file when nothing checks it first (the control)."""
    if name.startswith("pt2"):
        torch.export.load(str(path))
    else:
        torch.jit.load(str(path))(torch.zeros(2, N_FEATURES))


@pytest.mark.parametrize("name", ATTACKS)
def test_the_attacks_are_live(tmp_path, name):
    marker = tmp_path / "MARKER"
    path = build_attack(name, tmp_path / "files", marker)
    assert not marker.exists()
    with contextlib.suppress(Exception):  # most payloads break the load after they ran
        _load_with_torch(name, path)
    assert marker.exists()


@pytest.fixture
def torch_never_opens(monkeypatch):
    """Fail the test if torch is asked to open a model file at all."""

    def opened(*args, **kwargs):
        raise AssertionError(f"torch opened {args[:1]} although the check should have refused it")

    monkeypatch.setattr(torch.export, "load", opened)
    monkeypatch.setattr(torch.jit, "load", opened)


@pytest.mark.parametrize("name", ATTACKS)
def test_the_engine_loader_refuses_before_torch_opens_the_file(tmp_path, name, torch_never_opens):
    marker = tmp_path / "MARKER"
    path = build_attack(name, tmp_path / "files", marker)
    load = load_exported if name.startswith("pt2") else load_torchscript
    with pytest.raises(ModelError) as info:
        load(path)
    message = str(info.value)
    assert f"{path}: refused: " in message and expected_member(name) in message, message
    assert not marker.exists()


def _spec_for(name: str, path, synthetic_spec):
    if name.startswith("pt2"):
        return synthetic_spec(mode="evaluate", checkpoints=[str(path)] * 3)
    return synthetic_spec(model={"torchscript": str(path)})


@pytest.mark.parametrize("name", ATTACKS)
def test_a_job_with_the_file_fails_as_bad_input_and_nothing_runs(tmp_path, name, synthetic_spec):
    marker = tmp_path / "MARKER"
    path = build_attack(name, tmp_path / "files", marker)
    with pytest.raises(ModelError, match=expected_member(name)):
        run_job(_spec_for(name, path, synthetic_spec), tmp_path / "out")
    assert not marker.exists()


@pytest.mark.parametrize("name", ATTACKS)
def test_the_cli_exits_2_naming_the_member_unconfined(tmp_path, name, synthetic_spec, monkeypatch):
    from typer.testing import CliRunner

    from clgate.cli import app

    monkeypatch.setenv("CLGATE_SANDBOX", "none")
    monkeypatch.setenv("CLGATE_ALLOW_UNCONFINED", "true")
    marker = tmp_path / "MARKER"
    path = build_attack(name, tmp_path / "files", marker)
    spec = tmp_path / "job.json"
    if name.startswith("pt2"):  # clgate evaluate -c CK … job.json: the checkpoints come from the command line
        spec.write_text(synthetic_spec().model_dump_json(exclude_none=True))
        command = ["evaluate", *(["-c", str(path)] * 3), str(spec)]
    else:
        spec.write_text(_spec_for(name, path, synthetic_spec).model_dump_json(exclude_none=True))
        command = ["run", str(spec)]
    result = CliRunner().invoke(app, [*command, "--out", str(tmp_path / "out"), "-q"])
    assert result.exit_code == 2, result.output
    assert "refused" in result.output and expected_member(name) in result.output
    assert "Traceback" not in result.output
    assert not marker.exists()


# ---------------------------------------------------------------------- honest files
_SHAPES = {"mlp": (N_FEATURES,), "cnn": (1, 8, 8), "resnet18-slim": (3, 8, 8)}


@pytest.mark.parametrize("arch", list(_SHAPES))
def test_honest_files_of_every_builtin_architecture_load_and_predict_the_same(tmp_path, arch):
    torch.manual_seed(0)
    shape = _SHAPES[arch]
    model = build_model(arch, shape, N_CLASSES, hidden=16).eval()
    x = torch.randn(5, *shape)  # another batch size than the export's: the dynamic dimension is used
    with torch.no_grad():
        expected = model(x)
        scripted, traced = torch.jit.script(model), torch.jit.trace(model, x)
    torch.jit.save(scripted, str(tmp_path / "script.pt"))
    torch.jit.save(traced, str(tmp_path / "trace.pt"))
    export_program(model, tmp_path / "model.pt2", shape)
    loaded = [
        load_torchscript(tmp_path / "script.pt"),
        load_torchscript(tmp_path / "trace.pt"),
        load_exported(tmp_path / "model.pt2"),
    ]
    for candidate in loaded:
        candidate.eval()
        with torch.no_grad():
            torch.testing.assert_close(candidate(x), expected)


def test_common_layers_scripted_pass_the_code_check(tmp_path):
    from torch import nn

    model = nn.Sequential(
        nn.Conv2d(3, 4, 3),
        nn.GroupNorm(2, 4),
        nn.AvgPool2d(2),
        nn.Dropout2d(),
        nn.Upsample(scale_factor=2),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.LayerNorm(36),
        nn.GELU(),
        nn.Linear(36, 8),
        nn.BatchNorm1d(8),
        nn.Dropout(0.1),
        nn.LeakyReLU(),
        nn.Tanh(),
        nn.Softmax(1),
    ).eval()
    x = torch.randn(2, 3, 8, 8)
    torch.jit.save(torch.jit.script(model), str(tmp_path / "layers.pt"))
    with torch.no_grad():
        torch.testing.assert_close(load_torchscript(tmp_path / "layers.pt")(x), model(x))


class _WithConstants(torch.nn.Module):
    """A tensor constant, a non-persistent buffer and arithmetic on the symbolic batch size."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(N_FEATURES, 4)
        self.bn = torch.nn.BatchNorm1d(4)
        self.c = torch.randn(4)
        self.register_buffer("extra", torch.ones(4), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn(self.lin(x)) + self.c + self.extra
        return torch.cat([y, y.new_zeros(x.shape[0] * 2 // 2, 2)], 1).softmax(1)


def test_an_export_with_constants_and_size_arithmetic_loads(tmp_path):
    torch.manual_seed(0)
    model = _WithConstants().eval()
    path = export_program(model, tmp_path / "constants.pt2")
    x = torch.randn(5, N_FEATURES)
    with torch.no_grad():
        torch.testing.assert_close(load_exported(path)(x), model(x))


@pytest.mark.parametrize(
    "module",
    [
        pytest.param(lambda: torch.nn.LSTM(8, 8), id="lstm"),
        pytest.param(lambda: torch.nn.GRU(8, 8), id="gru"),
        pytest.param(lambda: torch.nn.MultiheadAttention(8, 2), id="attention"),
        pytest.param(lambda: torch.nn.TransformerEncoderLayer(8, 2, 16), id="transformer"),
        pytest.param(lambda: torch.nn.Embedding(10, 4), id="embedding"),
        pytest.param(lambda: torch.nn.Bilinear(4, 4, 2), id="bilinear"),
    ],
)
def test_scripted_library_layers_pass_the_check_and_load(tmp_path, module):
    from clgate.engine.modelfile import check_model_file

    torch.jit.save(torch.jit.script(module().eval()), str(tmp_path / "layer.pt"))
    assert check_model_file(str(tmp_path / "layer.pt")) == "torchscript"
    assert isinstance(load_torchscript(tmp_path / "layer.pt"), torch.jit.ScriptModule)


def test_the_installed_clgate_command_refuses_it_too(tmp_path, synthetic_spec):
    """The real `clgate run` process, unconfined, on a spec naming the spaced-__setstate__ file."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    marker = tmp_path / "MARKER"
    path = build_attack("ts-setstate", tmp_path / "files", marker)
    spec = tmp_path / "job.json"
    spec.write_text(_spec_for("ts-setstate", path, synthetic_spec).model_dump_json(exclude_none=True))
    clgate = Path(sys.executable).with_name("clgate")
    env = {**os.environ, "CLGATE_SANDBOX": "none", "CLGATE_ALLOW_UNCONFINED": "true"}
    proc = subprocess.run(
        [str(clgate), "run", str(spec), "--out", str(tmp_path / "out"), "-q"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    assert "refused" in proc.stderr and "(aten::from_file) accesses files" in proc.stderr, proc.stderr
    assert expected_member("ts-setstate") in proc.stderr and "Traceback" not in proc.stderr
    assert not marker.exists()
