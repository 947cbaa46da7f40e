"""Model files: safetensors and state dicts load; TorchScript trains in place; pickles are refused
without ever being unpickled."""

from __future__ import annotations

import pickle

import pytest
import torch

from clgate.documents import load_log
from clgate.engine import run_job
from clgate.engine.errors import ModelError
from clgate.engine.models import (
    build_model,
    inspect_model_file,
    load_model,
    load_state_dict_file,
    load_torchscript,
)

# torch.jit is deprecated upstream; TorchScript candidates are still a supported input.
pytestmark = [
    pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:Detected pickle protocol:UserWarning"),  # the payload tests
]


class FileWriter:
    """Unpickling this object opens (creates) ``path`` for writing: proof that code ran."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _payloads(tmp_path, target):
    """Three files that would create ``target`` if unpickled: torch.save zip, raw pickle, legacy
    torch.save."""
    zip_payload = tmp_path / "model.pt"
    torch.save({"model": FileWriter(str(target)), "w": torch.zeros(2)}, zip_payload)
    raw = tmp_path / "model.pkl"
    raw.write_bytes(pickle.dumps(FileWriter(str(target))))
    legacy = tmp_path / "legacy.pt"
    torch.save(FileWriter(str(target)), legacy, _use_new_zipfile_serialization=False)
    return [zip_payload, raw, legacy]


def test_the_payloads_are_live(tmp_path):
    """Control: the same payloads DO create their file when unpickled without restriction."""
    for i in range(3):
        folder = tmp_path / f"p{i}"
        folder.mkdir()
        target = folder / "pwned-control"
        payload = _payloads(folder, target)[i]
        if i == 1:
            pickle.loads(payload.read_bytes())
        else:
            torch.load(payload, weights_only=False)
        assert target.exists()


@pytest.mark.parametrize("which", [0, 1, 2], ids=["torch-save-zip", "raw-pickle", "legacy-torch-save"])
def test_pickled_payload_is_refused_and_never_unpickled(tmp_path, which, synthetic_spec):
    target = tmp_path / "pwned"
    payload = _payloads(tmp_path, target)[which]
    assert inspect_model_file(payload) in ("pickled_model", "pickle")
    for load in (load_state_dict_file, load_torchscript):
        with pytest.raises(ModelError, match="refused") as info:
            load(payload)
        assert "TorchScript" in str(info.value) and "safetensors" in str(info.value)
    with pytest.raises(ModelError, match="refused"):
        run_job(synthetic_spec(model={"arch": "mlp", "weights": str(payload)}), tmp_path / "a")
    with pytest.raises(ModelError, match="refused"):
        run_job(synthetic_spec(model={"torchscript": str(payload)}), tmp_path / "b")
    with pytest.raises(ModelError, match="refused"):
        run_job(synthetic_spec(mode="evaluate", checkpoints=[str(payload)] * 3), tmp_path / "c")
    assert not target.exists()


def test_pickled_whole_model_is_refused_with_export_hint(tmp_path):
    model = build_model("mlp", (8,), 6, hidden=16)
    path = tmp_path / "whole.pt"
    torch.save(model, path)
    assert inspect_model_file(path) == "pickled_model"
    with pytest.raises(ModelError) as info:
        load_state_dict_file(path)
    message = str(info.value)
    assert (
        "pickled whole model" in message
        and "torch.jit.save" in message
        and "safetensors.torch.save_file" in message
    )


def test_weights_from_safetensors_and_state_dict(tmp_path):
    from safetensors.torch import save_file

    torch.manual_seed(1)
    src = build_model("mlp", (8,), 6, hidden=16)
    save_file(src.state_dict(), str(tmp_path / "w.safetensors"))
    torch.save(src.state_dict(), tmp_path / "w.pt")
    torch.save({"epoch": 3, "state_dict": src.state_dict()}, tmp_path / "ck.pt")
    torch.save(src.state_dict(), tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    assert inspect_model_file(tmp_path / "w.safetensors") == "safetensors"
    assert inspect_model_file(tmp_path / "w.pt") == "state_dict"
    assert inspect_model_file(tmp_path / "legacy.pt") == "pickle"  # read only by the weights_only unpickler
    x = torch.randn(3, 8)
    for name in ("w.safetensors", "w.pt", "ck.pt", "legacy.pt"):
        torch.manual_seed(99)  # a different init: the weights must come from the file
        model, info = load_model(
            arch="mlp", weights=tmp_path / name, torchscript=None, input_shape=(8,), n_classes=6, hidden=16
        )
        assert torch.equal(model(x), src(x)) and len(info["model_sha256"]) == 64
    with pytest.raises(ModelError, match="weights do not fit the architecture"):
        load_model(
            arch="mlp", weights=tmp_path / "w.pt", torchscript=None, input_shape=(8,), n_classes=6, hidden=32
        )
    with pytest.raises(ModelError, match=r"size mismatch for net.5.weight"):
        load_model(
            arch="mlp", weights=tmp_path / "w.pt", torchscript=None, input_shape=(8,), n_classes=4, hidden=16
        )
    torch.jit.save(torch.jit.script(src), str(tmp_path / "ts.pt"))
    with pytest.raises(ModelError, match=r"outputs \(2, 6\) for a batch of 2; expected \(2, 4\)"):
        load_model(arch=None, weights=None, torchscript=tmp_path / "ts.pt", input_shape=(8,), n_classes=4)
    with pytest.raises(ModelError, match=r"cannot take inputs of shape \(5,\)"):
        load_model(arch=None, weights=None, torchscript=tmp_path / "ts.pt", input_shape=(5,), n_classes=6)


def test_torchscript_candidate_trains_in_place_and_evaluates(tmp_path, synthetic_spec):
    torch.manual_seed(0)
    scripted = torch.jit.script(build_model("mlp", (8,), 6, hidden=32))
    path = tmp_path / "candidate.pt"
    torch.jit.save(scripted, str(path))
    before = path.read_bytes()
    assert inspect_model_file(path) == "torchscript"
    spec = synthetic_spec(
        **{
            "model": {"torchscript": str(path)},
            "strategy.name": "er",
            "strategy.mem_size": 24,
            "training.epochs": 3,
            "training.save_final": True,
        }
    )
    (log_path,) = run_job(spec, tmp_path / "out")
    log = load_log(log_path)
    assert log.meta["model"] == "torchscript" and len(log.meta["model_sha256"]) == 64
    end = log.points[-1]
    assert end.task_end and sum(end.correct) / sum(end.total) > 0.5  # 6 classes: chance is 1/6
    assert log.resources[0].ops_pass > 0  # flop counting works through TorchScript
    assert path.read_bytes() == before  # the candidate file is not modified
    trained = torch.jit.load(str(tmp_path / "out" / "model-seed0.pt"))
    assert any(
        not torch.equal(a, b) for a, b in zip(trained.parameters(), scripted.parameters(), strict=False)
    )


def test_builtin_architectures_shapes():
    for arch, shape in (
        ("mlp", (1, 8, 8)),
        ("cnn", (1, 8, 8)),
        ("cnn", (8, 8)),
        ("resnet18-slim", (3, 12, 12)),
    ):
        model = build_model(arch, shape, 7)
        assert model(torch.zeros(2, *shape)).shape == (2, 7)
    with pytest.raises(ModelError, match="needs image inputs"):
        build_model("cnn", (8,), 3)
    torch.manual_seed(0)
    resnet = build_model("resnet18-slim", (3, 32, 32), 10)
    # the reduced ResNet-18 of Lopez-Paz & Ranzato (nf = 20) has about 1.1 M parameters for 10 classes
    assert 1_000_000 < sum(p.numel() for p in resnet.parameters()) < 1_300_000


def test_weights_without_arch_and_torchscript_as_weights(tmp_path):
    scripted = torch.jit.script(build_model("mlp", (8,), 6, hidden=8))
    torch.jit.save(scripted, str(tmp_path / "ts.pt"))
    with pytest.raises(ModelError, match=r"TorchScript module; give it as model.torchscript"):
        load_state_dict_file(tmp_path / "ts.pt")
    (tmp_path / "junk.bin").write_bytes(b"\x00\x01garbage")
    with pytest.raises(ModelError, match="unrecognised model file"):
        load_state_dict_file(tmp_path / "junk.bin")
    with pytest.raises(ModelError, match="not a TorchScript file"):
        load_torchscript(tmp_path / "junk.bin")
