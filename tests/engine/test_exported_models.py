"""torch.export programs (.pt2) in evaluate mode: the same counts as the weights they were exported
from; archives that would unpickle objects or load compiled code are refused."""

from __future__ import annotations

import json
import zipfile

import pytest
import torch

from clgate.documents import load_log
from clgate.engine import run_job
from clgate.engine.errors import ModelError
from clgate.engine.models import build_model, inspect_model_file, load_exported, load_torchscript


def _export(model: torch.nn.Module, path, n_features: int = 8):
    model.eval()
    batch = torch.export.Dim("batch")
    program = torch.export.export(model, (torch.zeros(2, n_features),), dynamic_shapes=({0: batch},))
    torch.export.save(program, str(path))
    return path


def test_exported_checkpoints_evaluate_like_their_weights(tmp_path, synthetic_spec):
    from safetensors.torch import save_file

    torch.manual_seed(0)
    weights, programs = [], []
    for k in range(3):
        m = build_model("mlp", (8,), 6, hidden=32)
        save_file(m.state_dict(), str(tmp_path / f"ck{k}.safetensors"))
        weights.append(str(tmp_path / f"ck{k}.safetensors"))
        programs.append(str(_export(m, tmp_path / f"ck{k}.pt2")))
    assert inspect_model_file(programs[0]) == "export"
    (a,) = run_job(synthetic_spec(mode="evaluate", checkpoints=weights), tmp_path / "a")
    (b,) = run_job(synthetic_spec(mode="evaluate", checkpoints=programs), tmp_path / "b")
    la, lb = load_log(a), load_log(b)
    assert la.points == lb.points and sum(la.points[-1].total) > 0
    assert [c["sha256"] for c in lb.meta["checkpoints"]] != [c["sha256"] for c in la.meta["checkpoints"]]


def _rewrite(src, dst, change):
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = change(info.filename, zin.read(info))
            zout.writestr(info, data)
        extra = change("__extra__", b"")
        if extra:
            zout.writestr(f"{zin.namelist()[0].split('/')[0]}/data/aotinductor/model/model.so", extra)
    return dst


def test_pickled_weights_and_compiled_code_are_refused(tmp_path):
    torch.manual_seed(0)
    good = _export(build_model("mlp", (8,), 6, hidden=16), tmp_path / "good.pt2")
    assert isinstance(load_exported(good)(torch.zeros(3, 8)), torch.Tensor)

    def pickled(name: str, data: bytes) -> bytes:
        if name.endswith("weights_config.json"):
            cfg = json.loads(data)
            first = next(iter(cfg["config"]))
            cfg["config"][first]["use_pickle"] = True
            return json.dumps(cfg).encode()
        return data

    with pytest.raises(ModelError, match=r"refused: good/data/weights/weight_0: .*nor a torch.save file"):
        load_exported(_rewrite(good, tmp_path / "pickled.pt2", pickled))
    with pytest.raises(ModelError, match="compiled code"):
        load_exported(
            _rewrite(good, tmp_path / "aoti.pt2", lambda n, d: b"\x7fELF" if n == "__extra__" else d)
        )
    with pytest.raises(ModelError, match="evaluated, not retrained"):
        load_torchscript(good)
