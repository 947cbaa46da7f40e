"""Projects against a running ``clgate serve`` (embedded executor, a real process): a key of one project
cannot read, cancel, waive, re-gate or post under another project's model name; an approver cannot
waive their own job; an expired waiver no longer counts; series carry the project label and a key sees its
own project's only; a deduplicated upload shows a project its own record; a project's admin acts within
its project (the global_admin role acts across)."""

from __future__ import annotations

import datetime as dt
import time

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

STRICT = {"name": "strict", "version": "1", "rules": [{"metric": "mica", "floor": 0.99}]}


def _metrics_job(client, log_ref: str, model: str) -> dict:
    r = client.post(
        "/v1/jobs",
        json={
            "mode": "metrics",
            "model_name": model,
            "logs": [log_ref],
            "policy": {"name": "strict", "version": "1"},
        },
    )
    assert r.status_code == 202, r.text
    return r.json()


@pytest.fixture
def teams(embedded_service, example_log):
    """Project ``default`` (the fixture's keys) and project ``team-b``, each with a policy and a log."""
    svc = embedded_service
    admin = svc.clients["admin"]
    b = {}
    for role in ("viewer", "submitter", "approver"):
        r = admin.post("/v1/keys", json={"name": f"b-{role}", "role": role, "project": "team-b"})
        assert r.status_code == 201 and r.json()["project"] == "team-b", r.text
        b[role] = svc.client(r.json()["key"])
    r = admin.post("/v1/keys", json={"name": "a-approver-2", "role": "approver"})
    a_approver2 = svc.client(r.json()["key"])
    for approver in (svc.clients["approver"], b["approver"]):
        assert approver.post("/v1/policies", json=STRICT).status_code == 201  # one name, one per project
    a_log = (
        svc.clients["submitter"]
        .post("/v1/artifacts", params={"kind": "log"}, content=example_log)
        .json()["ref"]
    )
    job = _metrics_job(svc.clients["submitter"], a_log, "alpha")
    done = svc.wait_job(job["id"])
    assert done["state"] == "succeeded" and done["verdict"] == "FAIL" and done["project"] == "default", done
    yield {
        "svc": svc,
        "a": svc.clients,
        "b": b,
        "a_approver2": a_approver2,
        "a_log": a_log,
        "a_job": done,
        "example_log": example_log,
    }
    for c in (*b.values(), a_approver2):
        c.close()


def test_another_project_cannot_see_or_touch_a_job(teams):
    job_id, b = teams["a_job"]["id"], teams["b"]
    for path in (
        f"/v1/jobs/{job_id}",
        f"/v1/jobs/{job_id}/results",
        f"/v1/jobs/{job_id}/results/report.md",
        f"/v1/jobs/{job_id}/decision",
        f"/v1/jobs/{job_id}/waivers",
        f"/v1/artifacts/{teams['a_log']}",
        f"/v1/artifacts/{teams['a_log']}/content",
        "/v1/baselines/alpha",
    ):
        r = b["viewer"].get(path)
        assert r.status_code == 404, (path, r.text)
        assert "team-b" not in r.text  # nothing about the other project leaks either
    assert b["viewer"].get("/v1/jobs").json() == {"data": [], "count": 0}
    assert b["viewer"].get("/v1/artifacts").json()["count"] == 0
    assert b["viewer"].get("/v1/policies").json()["count"] == 1  # its own only
    assert all(e["project"] == "team-b" for e in b["viewer"].get("/v1/audit").json()["data"])
    assert job_id not in b["viewer"].get("/v1/audit", params={"subject_id": job_id}).text
    assert b["submitter"].post(f"/v1/jobs/{job_id}/cancel").status_code == 404
    r = b["submitter"].post(f"/v1/jobs/{job_id}/regate", json={"policy": {"name": "strict", "version": "1"}})
    assert r.status_code == 404, r.text
    r = b["approver"].post(
        f"/v1/jobs/{job_id}/waivers", json={"justification": "team b waives team a's FAIL here"}
    )
    assert r.status_code == 404, r.text
    r = b["approver"].put("/v1/baselines/alpha", json={"job_id": job_id})
    assert r.status_code == 404, r.text
    # the admin sees across projects
    assert teams["a"]["admin"].get(f"/v1/jobs/{job_id}").status_code == 200


def test_no_posting_under_another_projects_model_name(teams):
    b = teams["b"]
    # another project's artifact cannot be referred to without uploading it
    r = b["submitter"].post(
        "/v1/jobs",
        json={
            "mode": "metrics",
            "model_name": "beta",
            "logs": [teams["a_log"]],
            "policy": {"name": "strict", "version": "1"},
        },
    )
    assert r.status_code == 422 and "does not exist" in r.json()["reason"]
    files = teams["a"]["viewer"].get(f"/v1/jobs/{teams['a_job']['id']}/results").json()["files"]
    a_result = "sha256:" + next(f["sha256"] for f in files if f["name"] == "decision.json")
    assert teams["a"]["viewer"].get(f"/v1/artifacts/{a_result}").status_code == 200  # its own job's result
    assert b["viewer"].get(f"/v1/artifacts/{a_result}").status_code == 404  # not another project's
    ref = (
        b["submitter"]
        .post("/v1/artifacts", params={"kind": "log"}, content=teams["example_log"])
        .json()["ref"]
    )
    r = b["submitter"].post(
        "/v1/jobs",
        json={
            "mode": "metrics",
            "model_name": "alpha",
            "logs": [ref],
            "policy": {"name": "strict", "version": "1"},
        },
    )
    assert r.status_code == 403 and "another project" in r.json()["reason"], r.text
    mine = _metrics_job(b["submitter"], ref, "beta")  # a name of its own is fine
    done = teams["svc"].wait_job(mine["id"], client=b["viewer"])
    assert done["state"] == "succeeded"
    assert b["viewer"].get(f"/v1/jobs/{mine['id']}").json()["project"] == "team-b"
    assert teams["a"]["viewer"].get(f"/v1/jobs/{mine['id']}").status_code == 404
    # the global admin (the bootstrap key) reads across projects
    assert teams["a"]["admin"].get(f"/v1/jobs/{mine['id']}").status_code == 200
    metrics = teams["a"]["admin"].get("/metrics").text
    assert 'clgate_model_verdict{model="alpha",project="default",verdict="FAIL"} 1.0' in metrics
    assert 'clgate_model_verdict{model="beta",project="team-b",verdict="FAIL"} 1.0' in metrics
    assert 'clgate_decisions_total{project="team-b",verdict="FAIL"} 1.0' in metrics
    # a key of a project sees its own project's series only
    mine_only = b["viewer"].get("/metrics").text
    assert 'model="beta"' in mine_only and 'project="team-b"' in mine_only
    assert 'model="alpha"' not in mine_only and 'project="default"' not in mine_only
    theirs_only = teams["a"]["viewer"].get("/metrics").text
    assert 'model="alpha"' in theirs_only and 'model="beta"' not in theirs_only
    assert 'project="team-b"' not in theirs_only


def test_a_deduplicated_upload_reveals_nothing_of_another_project(teams):
    svc, b = teams["svc"], teams["b"]
    a_sub = teams["a"]["submitter"]
    first = a_sub.post(
        "/v1/artifacts", params={"kind": "data", "filename": "alpha-secret.npz"}, content=b"alpha's bytes"
    )
    assert first.status_code == 201, first.text
    again = b["submitter"].post(
        "/v1/artifacts", params={"kind": "data", "filename": "beta.npz"}, content=b"alpha's bytes"
    )
    assert again.status_code == 201, again.text  # granted to beta now: beta's own record
    body = again.json()
    assert body["filename"] == "beta.npz" and body["created_by"] != first.json()["created_by"]
    assert "alpha" not in again.text and first.json()["created_by"] not in again.text
    for path in (f"/v1/artifacts/{body['ref']}", "/v1/artifacts"):
        assert "alpha-secret" not in b["viewer"].get(path).text, path
    r = b["viewer"].get(f"/v1/artifacts/{body['ref']}/content")
    assert r.content == b"alpha's bytes" and "alpha-secret" not in r.headers["content-disposition"]
    # alpha still sees its own name
    assert a_sub.get(f"/v1/artifacts/{body['ref']}").json()["filename"] == "alpha-secret.npz"
    assert svc.clients["viewer"].get("/v1/artifacts", params={"kind": "data"}).json()["count"] >= 1


def test_a_projects_admin_acts_only_within_its_project(teams):
    svc = teams["svc"]
    glob = teams["a"]["admin"]  # the bootstrap key: global_admin
    assert glob.get("/v1/whoami").json()["role"] == "global_admin"
    r = glob.post("/v1/keys", json={"name": "b-admin", "role": "admin", "project": "team-b"})
    assert r.status_code == 201, r.text
    b_admin = svc.client(r.json()["key"])
    a_job = teams["a_job"]["id"]
    try:
        assert b_admin.get(f"/v1/jobs/{a_job}").status_code == 404
        assert b_admin.post(f"/v1/jobs/{a_job}/cancel").status_code == 404
        r = b_admin.post(f"/v1/jobs/{a_job}/regate", json={"policy": {"name": "strict", "version": "1"}})
        assert r.status_code == 404, r.text
        assert b_admin.get(f"/v1/artifacts/{teams['a_log']}").status_code == 404
        r = b_admin.post(
            "/v1/jobs",
            json={
                "mode": "metrics",
                "model_name": "beta-2",
                "logs": [teams["a_log"]],
                "policy": {"name": "strict", "version": "1"},
            },
        )
        assert r.status_code == 422 and "does not exist" in r.json()["reason"], r.text
        # keys: its own project's only, never a global one
        r = b_admin.post("/v1/keys", json={"name": "x", "role": "viewer", "project": "default"})
        assert r.status_code == 403 and "project" in r.json()["reason"], r.text
        r = b_admin.post("/v1/keys", json={"name": "x", "role": "global_admin", "project": "team-b"})
        assert r.status_code == 403 and "global_admin" in r.json()["reason"], r.text
        r = b_admin.post("/v1/keys", json={"name": "b-viewer-2", "role": "viewer", "project": "team-b"})
        assert r.status_code == 201, r.text
        listed = b_admin.get("/v1/keys").json()["data"]
        assert listed and {k["project"] for k in listed} == {"team-b"}
        a_viewer_id = svc.clients["viewer"].get("/v1/whoami").json()["id"]
        assert b_admin.delete(f"/v1/keys/{a_viewer_id}").status_code == 404
        assert 'model="alpha"' not in b_admin.get("/metrics").text
        # the global role acts across projects, explicitly
        assert glob.get(f"/v1/jobs/{a_job}").status_code == 200
        assert {k["project"] for k in glob.get("/v1/keys").json()["data"]} >= {"default", "team-b"}
    finally:
        b_admin.close()


def test_separation_of_duties_and_waiver_expiry(teams):
    a, svc = teams["a"], teams["svc"]
    # an approver submits (approvers may), then tries to waive their own FAIL
    own = svc.wait_job(_metrics_job(a["approver"], teams["a_log"], "alpha")["id"])
    r = a["approver"].post(
        f"/v1/jobs/{own['id']}/waivers", json={"justification": "my own job, waived by me now"}
    )
    assert r.status_code == 403 and "separation of duties" in r.json()["reason"], r.text
    # nor a re-gate of it: the re-gate's source is theirs
    regate = a["approver"].post(
        f"/v1/jobs/{own['id']}/regate", json={"policy": {"name": "strict", "version": "1"}}
    )
    regated = svc.wait_job(regate.json()["id"])
    assert regated["verdict"] == "FAIL"
    r = a["approver"].post(
        f"/v1/jobs/{regated['id']}/waivers", json={"justification": "re-gated by me, waived by me"}
    )
    assert r.status_code == 403
    # another approver may; a waiver with a past expiry is refused, one that expires stops counting
    other = teams["a_approver2"]
    past = (dt.datetime.now(dt.UTC) - dt.timedelta(days=1)).isoformat()
    r = other.post(
        f"/v1/jobs/{own['id']}/waivers",
        json={"justification": "reviewed by a second approver", "expires_at": past},
    )
    assert r.status_code == 422 and "expires_at" in r.json()["reason"]
    soon = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=3)
    r = other.post(
        f"/v1/jobs/{own['id']}/waivers",
        json={"justification": "reviewed by a second approver", "expires_at": soon.isoformat()},
    )
    assert r.status_code == 201, r.text
    assert a["viewer"].get(f"/v1/jobs/{own['id']}").json()["waived"] is True
    decision = a["viewer"].get(f"/v1/jobs/{own['id']}/decision").json()
    assert len(decision["record_hash"]) == 64 and len(decision["waivers"][0]["record_hash"]) == 64
    time.sleep(max(0.0, (soon - dt.datetime.now(dt.UTC)).total_seconds()) + 0.5)
    assert a["viewer"].get(f"/v1/jobs/{own['id']}").json()["waived"] is False  # expired: no longer waived
    assert a["viewer"].get("/v1/jobs", params={"verdict": "FAIL"}).json()["count"] >= 2
