"""An image folder uploaded as a tar or zip archive runs as an ``image_folder`` job on a real
`clgate serve`; an archive with a path that escapes (``..``) or a link is refused at submission (422 with
the reason, judged from its listing) and writes nothing anywhere."""

from __future__ import annotations

import io
import tarfile
import time
import zipfile

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
Image = pytest.importorskip("PIL.Image")


def _png(value: int) -> bytes:
    buf = io.BytesIO()
    Image.new("L", (6, 6), color=value).save(buf, format="PNG")
    return buf.getvalue()


def _folder_files() -> dict[str, bytes]:
    """train/ and test/ with four classes told apart by brightness."""
    files = {}
    for split, n in (("train", 6), ("test", 3)):
        for c in range(4):
            for i in range(n):
                files[f"shapes/{split}/c{c}/{i}.png"] = _png(40 + 60 * c + i)
    return files


def _zip(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return buf.getvalue()


def _tar(files: dict[str, bytes], *, link: str | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        if link:
            info = tarfile.TarInfo("shapes/train/c0/link.png")
            info.type, info.linkname = tarfile.SYMTYPE, link
            tf.addfile(info)
    return buf.getvalue()


def _spec(ref: str) -> dict:
    return {
        "data": {"kind": "image_folder", "path": {"artifact": ref}, "size": [6, 6], "color": "L"},
        "scenario": {"n_tasks": 2},
        "model": {"arch": "mlp", "hidden": 16},
        "strategy": {"name": "finetune"},
        "training": {"iterations": 5, "batch_size": 8},
        "evaluation": {"eval_every": 5},
        "seeds": [0],
        "device": "cpu",
    }


def test_image_folder_archives_run_and_hostile_ones_are_refused(embedded_service, policies):
    svc = embedded_service
    sub = svc.clients["submitter"]
    assert svc.clients["approver"].post("/v1/policies", json=policies["loose"]).status_code == 201

    def run(data: bytes, filename: str, name: str) -> dict:
        r = sub.post("/v1/artifacts", params={"kind": "data", "filename": filename}, content=data)
        assert r.status_code in (200, 201), r.text
        body = {
            "mode": "retrain",
            "model_name": name,
            "spec": _spec(r.json()["ref"]),
            "policy": {"name": "e2e-loose", "version": "1"},
        }
        r = sub.post("/v1/jobs", json=body)
        assert r.status_code == 202, r.text
        return svc.wait_job(r.json()["id"])

    files = _folder_files()
    for data, filename in ((_zip(files), "shapes.zip"), (_tar(files), "shapes.tar.gz")):
        job = run(data, filename, f"archive-{filename}")
        assert job["state"] == "succeeded", job

    # hostile archives are judged from their listing at submission: 422 naming the field, no job
    escaping = {**files, "shapes/../../../../escaped.png": _png(1)}
    for data, filename, expected in (
        (_zip(escaping), "evil.zip", "'..'"),
        (_tar(files, link="/etc/passwd"), "evil.tar.gz", "link"),
    ):
        ref = sub.post("/v1/artifacts", params={"kind": "data", "filename": filename}, content=data).json()
        body = {
            "mode": "retrain",
            "model_name": f"evil-{filename.split('.')[-1]}",
            "spec": _spec(ref["ref"]),
            "policy": {"name": "e2e-loose", "version": "1"},
        }
        r = sub.post("/v1/jobs", json=body)
        assert r.status_code == 422, r.text
        assert r.json()["reason"].startswith("spec.data.path: ") and expected in r.json()["reason"], r.text
    assert not list(svc.data_dir.parent.rglob("escaped.png"))


def _files(train: int, test: int) -> dict[str, bytes]:
    return {
        f"shapes/{split}/c{c}/{i}.png": _png(40 + 60 * c + i)
        for split, n in (("train", train), ("test", test))
        for c in range(4)
        for i in range(n)
    }


def test_the_configured_npz_limit_bounds_an_archive_on_the_api_and_in_the_worker(
    app_factory, test_client_class, admin_key, policies, monkeypatch
):
    """CLGATE_MAX_NPZ_BYTES bounds an archive's uncompressed size where the API judges it and where the
    worker extracts it: under it the job runs; over it the API answers 422 naming the setting, and a job the
    API could not judge (no torch there) fails in the worker with the same reason instead of running."""
    small, big = _zip(_files(2, 1)), _zip(_files(6, 3))
    sizes = {}
    for name, data in (("small", small), ("big", big)):
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            sizes[name] = sum(i.file_size for i in zf.infolist())
    decoded_big = 36 * 6 * 6  # 36 grey 6×6 images: what check_image_folder_limits counts once extracted
    limit = max(sizes["small"], decoded_big) + 1
    assert sizes["big"] > limit  # only the archive's own size is over the limit
    app, _ = app_factory(max_npz_bytes=limit)
    with test_client_class(app) as client:
        admin = {"X-API-Key": admin_key}
        assert client.post("/v1/policies", json=policies["loose"], headers=admin).status_code == 201

        def submit(data: bytes, name: str):
            ref = client.post(
                "/v1/artifacts",
                params={"kind": "data", "filename": f"{name}.zip"},
                content=data,
                headers=admin,
            ).json()["ref"]
            body = {
                "mode": "retrain",
                "model_name": name,
                "spec": _spec(ref),
                "policy": {"name": "e2e-loose", "version": "1"},
            }
            return client.post("/v1/jobs", json=body, headers=admin)

        def wait(job_id: str) -> dict:
            deadline = time.monotonic() + 240
            while (job := client.get(f"/v1/jobs/{job_id}", headers=admin).json())["state"] not in (
                "succeeded",
                "failed",
                "cancelled",
            ):
                assert time.monotonic() < deadline, job
                time.sleep(0.3)
            return job

        over = f"{sizes['big']} bytes uncompressed, more than the limit of {limit}"
        expected = f"archive: {over} (CLGATE_MAX_NPZ_BYTES)"
        refused = submit(big, "big")
        assert refused.status_code == 422, refused.text
        assert refused.json()["reason"] == f"spec.data.path: {expected}", refused.text

        accepted = submit(small, "small")
        assert accepted.status_code == 202, accepted.text
        assert wait(accepted.json()["id"])["state"] == "succeeded"

        # an API without the engine extra judges nothing: the worker refuses the same archive, same reason
        monkeypatch.setattr("clgate.service.submission.engine_available", lambda: False)
        queued = submit(big, "big-unjudged")
        assert queued.status_code == 202, queued.text
        job = wait(queued.json()["id"])
        assert job["state"] == "failed" and job["error"] == f"invalid input: spec.data.path: {expected}", job
