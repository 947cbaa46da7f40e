"""TorchScript candidates are checked against an operator allowlist when loaded: file, process and library
operators are refused, by name, before the model runs (also when they hide in a submodule or __setstate__)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from clgate.engine.errors import ModelError  # noqa: E402 - after importorskip
from clgate.engine.models import load_torchscript, torchscript_refusal  # noqa: E402 - after importorskip


class ReadsFile(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = torch.from_file("/etc/hostname", shared=False, size=4, dtype=torch.uint8)
        return self.lin(x) + t.sum().float() * 0.0


class Wraps(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = ReadsFile()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


def _save(module: torch.nn.Module, path):
    torch.jit.save(torch.jit.script(module), str(path))
    return path


@pytest.mark.parametrize("module", [ReadsFile, Wraps])
def test_a_file_operator_is_refused_by_name(tmp_path, module):
    path = _save(module(), tmp_path / "m.pt")
    with pytest.raises(ModelError, match=r"refused: .*code/.*\(aten::from_file\) accesses files"):
        load_torchscript(path)


def test_the_graph_check_catches_what_the_code_scan_misses(tmp_path, monkeypatch):
    from clgate.engine.modelfile import torchscript

    path = _save(Wraps(), tmp_path / "m.pt")
    monkeypatch.setattr(torchscript, "check_torchscript_archive", lambda p: None)
    with pytest.raises(ModelError, match=r"aten::from_file .*\(in Wraps\.forward\)"):  # calls inlined
        load_torchscript(path)


def test_an_ordinary_model_loads(tmp_path):
    model = torch.nn.Sequential(
        torch.nn.Flatten(),
        torch.nn.Linear(4, 8),
        torch.nn.ReLU(),
        torch.nn.Linear(8, 3),
        torch.nn.BatchNorm1d(3),
        torch.nn.Dropout(0.1),
    )
    loaded = load_torchscript(_save(model, tmp_path / "ok.pt"))
    assert loaded(torch.zeros(2, 4)).shape == (2, 3)


def test_refusals_name_the_operator():
    assert torchscript_refusal("aten::linear") is None and torchscript_refusal("prim::If") is None
    assert "aten::save" in torchscript_refusal("aten::save")
    assert "outside the allowed namespaces" in torchscript_refusal("my_ops::spawn")
