"""Decompression bombs through the API: judged at submission (422 naming the field and the limit), no job
created, and the data folder does not grow by more than the upload itself."""

from __future__ import annotations

import pytest

from tests.fixtures.bombs import folder_size, npz_bomb, tar_gz_bomb

pytestmark = pytest.mark.timeout(300)


def _spec(ref: str, kind: str) -> dict:
    data = {"kind": kind, "path": {"artifact": ref}}
    if kind == "image_folder":
        data.update(size=[6, 6], color="L")
    return {
        "data": data,
        "scenario": {"n_tasks": 2},
        "model": {"arch": "mlp", "hidden": 16},
        "training": {"iterations": 5, "batch_size": 8},
        "evaluation": {"eval_every": 5},
        "device": "cpu",
    }


@pytest.mark.parametrize(
    ("kind", "make", "limit"),
    [
        pytest.param("npz", npz_bomb, "CLGATE_MAX_SAMPLES", id="npz-bomb"),
        pytest.param("image_folder", tar_gz_bomb, r"limit|ratio above 200:1", id="tar-gz-bomb"),
    ],
)
def test_a_bomb_is_refused_at_submission_with_the_limit_named(api, policies, kind, make, limit):
    import re

    bomb = make()
    assert len(bomb) < 8 << 20
    sub = api.as_role("submitter")
    assert (
        api.post("/v1/policies", json=policies["loose"], headers=api.as_role("approver")).status_code == 201
    )
    r = api.post("/v1/artifacts", params={"kind": "data"}, content=bomb, headers=sub)
    assert r.status_code == 201, r.text
    before = folder_size(api.settings.data_dir)
    body = {
        "mode": "retrain",
        "model_name": f"bomb-{kind.replace('_', '-')}",
        "spec": _spec(r.json()["ref"], kind),
        "policy": {"name": "e2e-loose", "version": "1"},
    }
    r = api.post("/v1/jobs", json=body, headers=sub)
    assert r.status_code == 422, r.text
    reason = r.json()["reason"]
    assert reason.startswith("spec.data.path: ") and re.search(limit, reason), reason
    assert api.get("/v1/jobs", headers=sub).json()["count"] == 0  # no job was created
    assert folder_size(api.settings.data_dir) - before < 1 << 20  # nothing was expanded


def test_a_data_set_over_a_lowered_limit_names_the_setting(app_factory, test_client_class, admin_key):
    from tests.fixtures.bombs import npz_bomb as make

    app, _ = app_factory(max_npz_bytes=1 << 20)
    with test_client_class(app) as client:
        h = {"X-API-Key": admin_key}
        policy = {"name": "p", "version": "1", "rules": [{"metric": "acc", "floor": 0.0}]}
        assert client.post("/v1/policies", json=policy, headers=h).status_code == 201
        ref = client.post("/v1/artifacts", params={"kind": "data"}, content=make(20_000), headers=h).json()[
            "ref"
        ]
        r = client.post(
            "/v1/jobs",
            json={
                "mode": "retrain",
                "model_name": "m",
                "spec": _spec(ref, "npz"),
                "policy": {"name": "p", "version": "1"},
            },
            headers=h,
        )
        assert r.status_code == 422 and "CLGATE_MAX_NPZ_BYTES" in r.json()["reason"], r.text
