"""The model-file check holds in a worker's child too, confined (bubblewrap) or not: a job whose model is one
of the hostile files fails as invalid input naming the member, and the payload's marker never appears."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from clgate.store import Store
from clgate.store.db import session_scope, upgrade
from clgate.store.models import Artifact, Job, Policy
from clgate.store.settings import Settings
from clgate.workers import runner

torch = pytest.importorskip("torch")

from tests.fixtures.model_attacks import ATTACKS, build_attack, expected_member  # noqa: E402 - needs torch

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def _store(tmp_path: Path, mode: str) -> tuple[Settings, Store]:
    extra = {"allow_unconfined": True} if mode == "none" else {}
    settings = Settings(data_dir=tmp_path / "data", sandbox=mode, sandbox_kill_grace_s=1.0, **extra)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade(settings.resolved_database_url())
    return settings, runner.store_for(settings)


def _upload(ctx: Store, data: bytes, filename: str) -> str:
    stored = ctx.artifacts.put_bytes(data)
    with session_scope(ctx.sessions) as s:
        if s.get(Artifact, stored.sha256) is None:
            s.add(Artifact(sha256=stored.sha256, size=stored.size, kind="other", filename=filename))
    return f"sha256:{stored.sha256}"


def _npz() -> bytes:
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.random((60, 8), dtype=np.float32)
    y = np.repeat(np.arange(6), 10)
    buf = io.BytesIO()
    np.savez(buf, x_train=x, y_train=y, x_test=x[::2], y_test=y[::2])
    return buf.getvalue()


def _job(ctx: Store, name: str, model: Path) -> str:
    ref = {"artifact": _upload(ctx, model.read_bytes(), model.name)}
    spec = {
        "data": {"kind": "npz", "path": {"artifact": _upload(ctx, _npz(), "data.npz")}},
        "scenario": {"n_tasks": 3},
        "strategy": {"name": "finetune"},
        "training": {"iterations": 2, "batch_size": 8},
        "evaluation": {"eval_every": 2},
        "seeds": [0],
        "device": "cpu",
    }
    if name.startswith("pt2"):
        spec.update(mode="evaluate", model={"arch": "mlp"}, checkpoints=[{"path": ref}] * 3)
    else:
        spec.update(model={"torchscript": ref})
    with session_scope(ctx.sessions) as s:
        policy = Policy(
            name="p",
            version="1",
            document={"name": "p", "rules": [{"metric": "acc", "floor": 0.0}]},
            sha256="0" * 64,
        )
        s.add(policy)
        s.flush()
        job = Job(
            mode=spec.get("mode", "retrain"), queue="cpu", model_name="m", spec=spec, policy_id=policy.id
        )
        s.add(job)
        s.flush()
        return job.id


@pytest.mark.parametrize("mode", ["bwrap", "none"])
@pytest.mark.parametrize("name", ATTACKS)
def test_a_hostile_model_file_fails_the_job_before_it_is_loaded(tmp_path, name, mode, request):
    if mode == "bwrap":
        request.getfixturevalue("require_binary")("bwrap", "bubblewrap")
    marker = tmp_path / "MARKER"  # outside the job: writable by an unconfined child only
    model = build_attack(name, tmp_path / "files", marker)
    settings, ctx = _store(tmp_path, mode)
    job_id = _job(ctx, name, model)
    assert runner.execute_job(job_id, settings) == "failed"
    with ctx.sessions() as s:
        error = s.get(Job, job_id).error or ""
    assert error.startswith("invalid input"), error
    assert "refused" in error and expected_member(name).rsplit("/", 1)[-1] in error, error
    assert not marker.exists()
