"""Every input bound of the API answers 413/422 naming the limit (never a 500, never an accepted monster)."""

from __future__ import annotations

import io

import pytest

POLICY = {"name": "b", "version": "1", "rules": [{"metric": "acc", "floor": 0.0}]}


def _spec(**over) -> dict:
    spec = {
        "data": "digits",
        "scenario": {"n_tasks": 5},
        "model": {"arch": "mlp", "hidden": 8},
        "training": {"iterations": 2},
        "seeds": [0],
        "device": "cpu",
    }
    for dotted, value in over.items():
        node = spec
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return spec


@pytest.fixture
def submit(api):
    api.post("/v1/policies", json=POLICY, headers=api.as_role("approver")).raise_for_status()
    h = api.as_role("submitter")

    def post(spec=None, **body):
        doc = {"mode": "retrain", "model_name": "b", "policy": {"name": "b", "version": "1"}, **body}
        if spec is not None:
            doc["spec"] = spec
        return api.post("/v1/jobs", json=doc, headers=h)

    return post


def test_json_body_size_is_bounded(api, submit):
    r = submit(_spec(), model_name="x" * (2 * 1024 * 1024))
    assert r.status_code == 413 and "CLGATE_MAX_JSON_BYTES" in r.json()["reason"]


def test_json_nesting_is_bounded(api):
    deep = "[" * 900 + "]" * 900
    r = api.post(
        "/v1/policies", content=deep, headers={**api.as_role("approver"), "content-type": "application/json"}
    )
    assert r.status_code == 422 and "CLGATE_MAX_JSON_DEPTH" in r.json()["reason"]


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("model.hidden", 10**9, "65536"),
        ("strategy.mem_size", 10**12, "MAX_MEMORY_SIZE"),
        ("seeds", list(range(5000)), "at most 100"),
        ("training.iterations", 10**12, "10000000"),
        ("cpu_threads", 100000, "cores"),
    ],
)
def test_spec_sizes_are_bounded(submit, field, value, words):
    spec = _spec(**{field: value})
    if field == "strategy.mem_size":
        spec["strategy"]["name"] = "er"
    r = submit(spec)
    assert r.status_code == 422, r.text
    assert words in " ".join(r.json()["problems"]), r.json()


@pytest.mark.parametrize("text", ["Infinity", "-Infinity", "NaN", "1e999"])
def test_non_finite_numbers_are_refused(api, text):
    body = (
        '{"mode": "retrain", "model_name": "b", "policy": {"name": "b", "version": "1"}, '
        f'"spec": {{"data": "digits", "scenario": {{"n_tasks": 5}}, "training": {{"lr": {text}}}}}}}'
    )
    r = api.post(
        "/v1/jobs", content=body, headers={**api.as_role("submitter"), "content-type": "application/json"}
    )
    assert r.status_code == 422 and "finite" in r.json()["reason"], r.text


def test_policy_window_is_bounded(api):
    policy = {"name": "w", "version": "1", "rules": [{"metric": "wf100000000000000000000", "ceiling": 0.3}]}
    r = api.post("/v1/policies", json=policy, headers=api.as_role("approver"))
    assert r.status_code == 422 and "1000000" in r.text, r.text


@pytest.mark.parametrize("path", ["/v1/jobs", "/v1/policies", "/v1/artifacts", "/v1/audit"])
def test_pagination_skip_is_bounded(api, path):
    r = api.get(path, params={"skip": 2**63}, headers=api.as_role("admin"))
    assert r.status_code == 422 and "skip" in r.text, r.text


def test_nul_characters_are_refused(api, submit):
    r = submit(_spec(), model_name="a\x00b")
    assert r.status_code == 422 and "NUL" in r.json()["reason"]
    r = api.get("/v1/jobs", params={"model_name": "a\x00b"}, headers=api.as_role("viewer"))
    assert r.status_code == 422 and "NUL" in r.json()["reason"]


def test_npz_decompression_bomb_is_refused_before_allocation(tmp_path):
    import tracemalloc

    import numpy as np

    from clgate.engine.data import check_npz_limits

    bomb = tmp_path / "bomb.npz"
    np.savez_compressed(
        bomb,
        x_train=np.zeros((200_000, 64), "float32"),
        y_train=np.zeros(200_000, "int64"),
        x_test=np.zeros((10, 64), "float32"),
        y_test=np.zeros(10, "int64"),
    )
    assert bomb.stat().st_size < 1_000_000  # 53 MB inflated, well under 1 MB on disk
    tracemalloc.start()
    problems = check_npz_limits(bomb, max_bytes=10_000_000, max_samples=100_000)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 2_000_000  # headers only: nothing near the inflated size was allocated
    assert any("CLGATE_MAX_NPZ_BYTES" in p for p in problems)
    assert any("x_train has 200000 samples" in p and "CLGATE_MAX_SAMPLES" in p for p in problems)
    assert check_npz_limits(bomb, max_bytes=10**9, max_samples=10**6) == []


def test_a_job_with_a_bomb_npz_fails_with_the_limit(tmp_path):
    """Through the worker: the job fails with the reason before the loader inflates anything."""
    import numpy as np

    from clgate.store.db import session_scope, upgrade
    from clgate.store.models import Artifact, Job, Policy
    from clgate.store.settings import Settings
    from clgate.workers import runner

    settings = Settings(data_dir=tmp_path / "data", max_npz_bytes=1_000_000)
    settings.data_dir.mkdir()
    upgrade(settings.resolved_database_url())
    ctx = runner.store_for(settings)
    buf = io.BytesIO()
    np.savez_compressed(
        buf,
        x_train=np.zeros((50_000, 64), "float32"),
        y_train=np.zeros(50_000, "int64"),
        x_test=np.zeros((10, 64), "float32"),
        y_test=np.zeros(10, "int64"),
    )
    stored = ctx.artifacts.put_bytes(buf.getvalue())
    with session_scope(ctx.sessions) as s:
        s.add(Artifact(sha256=stored.sha256, size=stored.size, kind="data", filename="bomb.npz"))
        p = Policy(name="p", version="1", document=POLICY | {"name": "p"}, sha256="0" * 64)
        s.add(p)
        s.flush()
        spec = _spec(data={"kind": "npz", "path": {"artifact": stored.sha256}})
        job = Job(mode="retrain", queue="cpu", model_name="m", spec=spec, policy_id=p.id, progress={})
        s.add(job)
        s.flush()
        job_id = job.id
    assert runner.execute_job(job_id, settings) == "failed"
    with ctx.sessions() as s:
        error = s.get(Job, job_id).error
    assert "CLGATE_MAX_NPZ_BYTES" in error, error


def test_image_folder_bomb_and_counts_are_refused_from_headers(tmp_path):
    from PIL import Image

    from clgate.engine.data import check_image_folder_limits

    for split in ("train", "test"):
        for cls in ("a", "b"):
            (tmp_path / split / cls).mkdir(parents=True)
            for i in range(3):
                Image.new("L", (8, 8)).save(tmp_path / split / cls / f"{i}.png")
    # a PNG whose header declares 20000 x 20000 pixels, tiny on disk
    Image.new("1", (20000, 20000)).save(tmp_path / "train" / "a" / "bomb.png")
    ok = {"size": (32, 32), "color": "L", "max_bytes": 10**9, "max_samples": 10**6}
    problems = check_image_folder_limits(tmp_path, **ok)
    assert len(problems) == 1 and "decompression bomb" in problems[0]
    (tmp_path / "train" / "a" / "bomb.png").unlink()
    assert check_image_folder_limits(tmp_path, **ok) == []
    assert "CLGATE_MAX_SAMPLES" in check_image_folder_limits(tmp_path, **{**ok, "max_samples": 5})[0]
    assert "CLGATE_MAX_NPZ_BYTES" in check_image_folder_limits(tmp_path, **{**ok, "max_bytes": 1000})[0]


def test_data_sizes_are_bounded(submit):
    r = submit(_spec(data={"kind": "synthetic", "train_per_class": 10**9}))
    assert r.status_code == 422 and "100000" in " ".join(r.json()["problems"]), r.text
