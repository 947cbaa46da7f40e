"""The issue-10 attacks against a real `clgate serve` (embedded executor, bubblewrap): a model that
plants the admin key in the store under a forged hash is refused at submission (422) and plants nothing
(the next upload is served as uploaded), and a forward that never returns is cancelled within the grace
period while other jobs run."""

from __future__ import annotations

import hashlib
import io
import time

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
torch = pytest.importorskip("torch")

NEXT_UPLOAD = b"the bytes the attacker uploads next"


class PlantsKey(torch.nn.Module):
    def __init__(self, key: str, target: str, size: int) -> None:
        super().__init__()
        self.key, self.target, self.size = key, target, size
        self.lin = torch.nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        stolen = torch.from_file(self.key, shared=False, size=self.size, dtype=torch.uint8)
        planted = torch.from_file(self.target, shared=True, size=self.size, dtype=torch.uint8)
        planted.copy_(stolen)
        return self.lin(x.flatten(1)) + planted.sum().float() * 0.0


class Spins(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x
        while bool(y.sum() > -1.0):
            y = y * 1.0
        return self.lin(y.flatten(1))


def _scripted(module: torch.nn.Module) -> bytes:
    buf = io.BytesIO()
    torch.jit.save(torch.jit.script(module), buf)
    return buf.getvalue()


def _upload(sub, data: bytes, filename: str) -> str:
    r = sub.post("/v1/artifacts", params={"kind": "model", "filename": filename}, content=data)
    assert r.status_code in (200, 201), r.text
    return r.json()["ref"]


def _submit(svc, spec: dict, name: str) -> str:
    r = svc.clients["submitter"].post(
        "/v1/jobs",
        json={
            "mode": "retrain",
            "model_name": name,
            "spec": spec,
            "policy": {"name": "e2e-loose", "version": "1"},
        },
    )
    assert r.status_code == 202, r.text
    return r.json()["id"]


def test_hostile_models_against_a_running_service(
    embedded_service, require_binary, digits_npz, make_spec, policies, example_log
):
    require_binary("bwrap", "bubblewrap")
    svc = embedded_service
    sub, view = svc.clients["submitter"], svc.clients["viewer"]
    assert view.get("/readyz").json()["checks"]["sandbox"] == "bwrap"
    assert svc.clients["approver"].post("/v1/policies", json=policies["loose"]).status_code == 201
    data_ref = _upload(sub, digits_npz, "digits.npz")

    # 1. the key-planting model: refused by name, nothing planted, the next upload served as uploaded
    key = svc.data_dir / "admin.key"
    key.write_bytes(b"clg_the_admin_key")
    forged = hashlib.sha256(NEXT_UPLOAD).hexdigest()
    target = svc.data_dir / "artifacts" / "sha256" / forged[:2] / forged
    model_ref = _upload(sub, _scripted(PlantsKey(str(key), str(target), 17)), "model.pt")
    spec = {**make_spec(data_ref), "model": {"torchscript": {"artifact": model_ref}}}
    # judged at submission, from the file (never opened by torch): 422 naming the field, no job
    r = sub.post(
        "/v1/jobs",
        json={
            "mode": "retrain",
            "model_name": "planter",
            "spec": spec,
            "policy": {"name": "e2e-loose", "version": "1"},
        },
    )
    assert r.status_code == 422, r.text
    reason = r.json()["reason"]
    assert reason.startswith("spec.model.torchscript: ") and "aten::from_file" in reason, reason
    assert str(svc.data_dir) not in r.text and str(svc.tmp) not in r.text
    assert view.get("/v1/jobs").json()["count"] == 0
    assert not target.exists()
    ref = _upload(sub, NEXT_UPLOAD, "next.bin")
    assert view.get(f"/v1/artifacts/{ref}/content").content == NEXT_UPLOAD

    # 2. a forward that never returns: cancelled, killed after the grace period; other jobs still run
    spinner = _submit(
        svc,
        {
            **make_spec(data_ref),
            "model": {"torchscript": {"artifact": _upload(sub, _scripted(Spins()), "spin.pt")}},
        },
        "spinner",
    )
    for _ in range(600):
        if view.get(f"/v1/jobs/{spinner}").json()["state"] == "running":
            break
        time.sleep(0.1)
    r = sub.post(f"/v1/jobs/{spinner}/cancel")
    assert r.status_code in (200, 202), r.text
    job = svc.wait_job(
        spinner, timeout=90
    )  # the default grace is 10 s; without a kill it would spin for ever
    assert job["state"] == "cancelled", job
    log_ref = _upload(sub, example_log, "log.json")
    r = sub.post(
        "/v1/jobs",
        json={
            "mode": "metrics",
            "model_name": "after",
            "logs": [log_ref],
            "policy": {"name": "e2e-loose", "version": "1"},
        },
    )
    assert r.status_code == 202, r.text
    assert svc.wait_job(r.json()["id"])["state"] == "succeeded"
