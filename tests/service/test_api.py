"""The API in process (TestClient): auth and roles on every route, uploads and their limit,
validation errors as 4xx with reasons, policy immutability, the append-only audit trail."""

from __future__ import annotations

import hashlib
import re

import pytest
from fastapi.routing import APIRoute

from clgate.service.app import create_app
from clgate.store.settings import Settings

ROLE_ORDER = ["viewer", "submitter", "approver", "admin"]
PUBLIC = {"/healthz", "/readyz"}
FILL = {
    "job_id": "0" * 32,
    "ref": "sha256:" + "0" * 64,
    "name": "p",
    "version": "1",
    "model_name": "m",
    "key_id": "0" * 16,
}


def _required_role(route: APIRoute) -> str | None:
    names = []

    def walk(dep):
        for sub in dep.dependencies:
            if sub.call is not None:
                names.append(getattr(sub.call, "__name__", ""))
            walk(sub)

    walk(route.dependant)
    roles = [n.removeprefix("require_") for n in names if n.startswith("require_")]
    return roles[0] if roles else None


def _walk(routes, prefix=""):
    """(full path, APIRoute) of every route, through included routers (whatever FastAPI nests them in)."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield prefix + route.path, route
        elif hasattr(route, "original_router"):
            yield from _walk(route.original_router.routes, prefix + route.include_context.prefix)


def _routes():
    app = create_app(Settings(data_dir="/nonexistent-not-started"))
    out = []
    for path, route in _walk(app.routes):
        if path in PUBLIC or not route.include_in_schema:
            continue
        for method in sorted(route.methods - {"HEAD"}):
            out.append(pytest.param(method, path, _required_role(route), id=f"{method} {path}"))
    openapi = {(m.upper(), p) for p, ops in app.openapi()["paths"].items() for m in ops if p not in PUBLIC}
    assert {(p.values[0], p.values[1].replace(":path", "")) for p in out} == openapi, (
        "route walk disagrees with the OpenAPI schema"
    )
    return out


ROUTES = _routes()


def test_every_route_but_health_needs_a_role():
    assert len(ROUTES) >= 20
    missing = [p.id for p in ROUTES if p.values[2] is None]
    assert not missing, f"routes without a role: {missing}"


@pytest.mark.parametrize(("method", "path", "role"), ROUTES)
def test_route_refuses_missing_invalid_and_lower_keys(api, method, path, role):
    role = "admin" if role == "global_admin" else role  # the fixture's admin key is the global_admin one
    url = re.sub(r"\{(\w+)(?::path)?\}", lambda m: FILL.get(m[1], "x"), path)
    for headers in (
        {},
        {"X-API-Key": "clg_0000000000000000_" + "b" * 43},
        {"Authorization": "Bearer nonsense"},
    ):
        r = api.request(method, url, headers=headers)
        assert r.status_code == 401, (headers, r.text)
        assert r.json()["error"] == "unauthenticated" and r.json()["reason"]
    for lower in ROLE_ORDER[: ROLE_ORDER.index(role)]:
        r = api.request(method, url, headers=api.as_role(lower))
        assert r.status_code == 403, (lower, r.text)
        assert role in r.json()["reason"]
    r = api.request(method, url, headers=api.as_role(role))
    assert r.status_code not in (401, 403), r.text


def test_bearer_and_header_keys_and_whoami(api):
    assert (
        api.get("/v1/whoami", headers={"Authorization": f"Bearer {api.keys['approver']}"}).json()["role"]
        == "approver"
    )
    assert api.get("/v1/whoami", headers=api.as_role("viewer")).json()["name"] == "t-viewer"


def test_revoked_key_is_refused(api):
    key_id = api.get("/v1/whoami", headers=api.as_role("viewer")).json()["id"]
    assert api.delete(f"/v1/keys/{key_id}", headers=api.as_role("admin")).status_code == 200
    assert api.get("/v1/whoami", headers=api.as_role("viewer")).status_code == 401


def test_keys_are_stored_hashed(api):
    from sqlalchemy import select

    from clgate.store.models import ApiKey

    with api.app.state.sessions() as s:
        stored = [(k.id, k.secret_sha256) for k in s.scalars(select(ApiKey))]
    from clgate.service.auth import split_key

    secrets = [split_key(k)[1] for k in api.keys.values()]
    assert len(stored) == 4
    for _, digest in stored:
        assert digest not in secrets and len(digest) == 64
    assert {hashlib.sha256(s.encode()).hexdigest() for s in secrets} == {d for _, d in stored}


def test_health_needs_no_key(api):
    assert api.get("/healthz").json() == {"status": "ok", "checks": {}}
    ready = api.get("/readyz").json()
    assert ready["status"] == "ok" and ready["checks"]["database"] == "ok"


def test_openapi_needs_a_key_unless_the_docs_are_public(api, app_factory, test_client_class):
    for path in ("/openapi.json", "/docs", "/redoc"):
        assert api.get(path).status_code in (401, 404), path
    assert api.get("/openapi.json").json()["error"] == "unauthenticated"
    assert api.get("/openapi.json", headers=api.as_role("viewer")).status_code == 200
    app, _ = app_factory(public_docs=True)
    with test_client_class(app) as client:
        for path in ("/openapi.json", "/docs", "/redoc"):
            assert client.get(path).status_code == 200, path


def test_openapi_lists_the_v1_routes(api):
    spec = api.get("/openapi.json", headers=api.as_role("viewer")).json()
    for path in (
        "/v1/artifacts",
        "/v1/jobs",
        "/v1/jobs/{job_id}/regate",
        "/v1/jobs/{job_id}/waivers",
        "/v1/policies",
        "/v1/baselines/{model_name}",
        "/v1/audit",
        "/metrics",
    ):
        assert path in spec["paths"], path


# ---------------------------------------------------------------------- artifacts
def test_upload_is_content_addressed_and_downloadable(api):
    sub = api.as_role("submitter")
    data = b"model weights" * 1000
    digest = hashlib.sha256(data).hexdigest()
    r = api.post(
        "/v1/artifacts", params={"kind": "model", "filename": "w.safetensors"}, content=data, headers=sub
    )
    assert r.status_code == 201 and r.json()["sha256"] == digest and r.json()["size"] == len(data)
    assert api.post("/v1/artifacts", content=data, headers=sub).status_code == 200  # stored once
    got = api.get(f"/v1/artifacts/sha256:{digest}/content", headers=api.as_role("viewer"))
    assert got.content == data and got.headers["etag"] == f'"{digest}"'
    files = list((api.settings.artifact_dir / "sha256").rglob("*"))
    assert [f.name for f in files if f.is_file()] == [digest]


def test_upload_checks_the_expected_digest(api):
    r = api.post(
        "/v1/artifacts",
        params={"sha256": "sha256:" + "1" * 64},
        content=b"abc",
        headers=api.as_role("submitter"),
    )
    assert r.status_code == 422 and "expected" in r.json()["reason"]


def _chunks(total: int, size: int = 4096):
    for start in range(0, total, size):
        yield b"x" * min(size, total - start)


@pytest.mark.parametrize("streamed", [False, True], ids=["content-length", "chunked"])
def test_upload_limit(app_factory, admin_key, test_client_class, streamed):
    TestClient = test_client_class
    app, settings = app_factory(max_upload_bytes=10_000)
    headers = {"X-API-Key": admin_key}
    with TestClient(app) as client:
        body = _chunks(10_001) if streamed else b"x" * 10_001
        r = client.post("/v1/artifacts", content=body, headers=headers)
        assert r.status_code == 413, r.text
        assert r.json()["error"] == "too_large" and "10000 bytes" in r.json()["reason"]
        assert not [p for p in settings.artifact_dir.rglob("*") if p.is_file()]  # nothing half-written kept
        body = _chunks(10_000) if streamed else b"x" * 10_000
        assert client.post("/v1/artifacts", content=body, headers=headers).status_code == 201


def test_unknown_and_malformed_artifacts(api):
    view = api.as_role("viewer")
    assert api.get("/v1/artifacts/sha256:" + "e" * 64, headers=view).status_code == 404
    r = api.get("/v1/artifacts/not-a-hash", headers=view)
    assert r.status_code == 422 and "sha256" in r.json()["reason"]
    assert api.post("/v1/artifacts", content=b"", headers=api.as_role("submitter")).status_code == 422


# ---------------------------------------------------------------------- policies
def test_policy_validation_names_the_rule(api):
    r = api.post(
        "/v1/policies",
        json={"name": "p", "rules": [{"metric": "mika", "floor": 0.5}]},
        headers=api.as_role("approver"),
    )
    assert r.status_code == 422
    assert "rules[0].metric" in r.json()["reason"] and "mika" in r.json()["reason"]


def test_policy_versions_are_immutable(api):
    appr = api.as_role("approver")
    doc = {"name": "rel", "version": "1", "rules": [{"metric": "mica", "floor": 0.5}]}
    assert api.post("/v1/policies", json=doc, headers=appr).status_code == 201
    assert api.post("/v1/policies", json=doc, headers=appr).status_code == 200
    changed = {**doc, "rules": [{"metric": "mica", "floor": 0.4}]}
    r = api.post("/v1/policies", json=changed, headers=appr)
    assert r.status_code == 409 and "immutable" in r.json()["reason"]
    assert api.post("/v1/policies", json={**changed, "version": "2"}, headers=appr).status_code == 201
    listed = api.get("/v1/policies", params={"name": "rel"}, headers=api.as_role("viewer")).json()
    assert listed["count"] == 2 and [p["version"] for p in listed["data"]] == ["1", "2"]
    got = api.get("/v1/policies/rel/1", headers=api.as_role("viewer")).json()
    assert got["document"]["rules"][0]["floor"] == 0.5
    assert api.get("/v1/policies/rel/9", headers=api.as_role("viewer")).status_code == 404


# ---------------------------------------------------------------------- jobs: validation
@pytest.fixture
def with_policy(api):
    api.post(
        "/v1/policies",
        json={"name": "p", "version": "1", "rules": [{"metric": "acc", "floor": 0.1}]},
        headers=api.as_role("approver"),
    )
    return {"name": "p", "version": "1"}


def _submit(api, body):
    return api.post("/v1/jobs", json=body, headers=api.as_role("submitter"))


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param({"mode": "retrain", "model_name": "m"}, "policy", id="missing-policy"),
        pytest.param(
            {"mode": "retrain", "model_name": "m", "policy": {"name": "p", "version": "1"}},
            "spec: retrain mode needs a job spec",
            id="retrain-without-spec",
        ),
        pytest.param(
            {"mode": "metrics", "model_name": "m", "policy": {"name": "p", "version": "1"}, "logs": []},
            "metrics mode needs at least one",
            id="metrics-without-logs",
        ),
        pytest.param(
            {
                "mode": "metrics",
                "model_name": "a b",
                "policy": {"name": "p", "version": "1"},
                "logs": ["sha256:" + "a" * 64],
            },
            "model_name",
            id="bad-model-name",
        ),
        pytest.param(
            {"mode": "train", "model_name": "m", "policy": {"name": "p", "version": "1"}},
            "mode",
            id="unknown-mode",
        ),
        pytest.param(
            {
                "mode": "metrics",
                "model_name": "m",
                "policy": {"name": "p", "version": "1"},
                "logs": ["md5:abc"],
            },
            "logs[0]",
            id="bad-log-ref",
        ),
    ],
)
def test_job_body_errors_are_422_with_reasons(api, with_policy, body, expected):
    r = _submit(api, body)
    assert r.status_code == 422
    problems = r.json()["problems"]
    assert any(expected in p for p in problems), problems


def test_job_refers_to_existing_policy_and_artifacts(api, with_policy):
    r = _submit(
        api,
        {
            "mode": "metrics",
            "model_name": "m",
            "policy": {"name": "p", "version": "7"},
            "logs": ["sha256:" + "a" * 64],
        },
    )
    assert r.status_code == 422 and "policy p version 7 does not exist" in r.json()["reason"]
    r = _submit(
        api, {"mode": "metrics", "model_name": "m", "policy": with_policy, "logs": ["sha256:" + "a" * 64]}
    )
    assert r.status_code == 422 and "does not exist" in r.json()["reason"]


def test_spec_cannot_name_server_paths(api, with_policy):
    spec = {"data": {"kind": "npz", "path": "/etc/passwd"}, "scenario": {"n_tasks": 2}}
    r = _submit(api, {"mode": "retrain", "model_name": "m", "policy": with_policy, "spec": spec})
    assert (
        r.status_code == 422 and "spec.data.path" in r.json()["reason"] and "artifact" in r.json()["reason"]
    )


def test_spec_errors_name_the_field(api, with_policy):
    spec = {"data": "digits", "scenario": {"n_tasks": 5}, "training": {"lr": -1}}
    r = _submit(api, {"mode": "retrain", "model_name": "m", "policy": with_policy, "spec": spec})
    assert r.status_code == 422 and any("spec.training.lr" in p for p in r.json()["problems"]), r.json()
    spec = {"data": "digits", "scenario": {"n_tasks": 5}, "mode": "evaluate"}
    r = _submit(api, {"mode": "retrain", "model_name": "m", "policy": with_policy, "spec": spec})
    assert r.status_code == 422 and "mode" in r.json()["reason"]


def test_unknown_job_is_404_and_list_filters(api):
    view = api.as_role("viewer")
    assert api.get("/v1/jobs/" + "0" * 32, headers=view).status_code == 404
    r = api.get("/v1/jobs", params={"state": "sleeping"}, headers=view)
    assert r.status_code == 422 and "state" in r.json()["reason"]
    assert api.get("/v1/jobs", params={"limit": 0}, headers=view).status_code == 422
    assert api.get("/v1/jobs", headers=view).json() == {"data": [], "count": 0}


def test_baseline_needs_a_succeeded_job(api):
    r = api.put("/v1/baselines/m", json={"job_id": "0" * 32}, headers=api.as_role("approver"))
    assert r.status_code == 404
    assert api.get("/v1/baselines/m", headers=api.as_role("viewer")).status_code == 404


def test_errors_are_json_with_a_reason(api):
    r = api.get("/v1/nothing-here", headers=api.as_role("viewer"))
    assert r.status_code == 404 and r.json()["error"] == "not_found" and r.json()["reason"]
    r = api.post(
        "/v1/jobs",
        content=b"{not json",
        headers={**api.as_role("submitter"), "content-type": "application/json"},
    )
    assert r.status_code == 422 and r.json()["error"] == "invalid"


# ---------------------------------------------------------------------- audit trail
def test_audit_records_actions_and_is_append_only(api, with_policy):
    from sqlalchemy import select, text

    from clgate.store.models import AuditEvent, ImmutableRecordError

    events = api.get("/v1/audit", params={"action": "policy.created"}, headers=api.as_role("viewer")).json()
    assert events["count"] == 1 and "t-approver" in events["data"][0]["actor"]
    with api.app.state.sessions() as s:
        event = s.scalars(select(AuditEvent)).first()
        event.action = "rewritten"
        with pytest.raises(ImmutableRecordError):
            s.commit()
        s.rollback()
    with api.app.state.engine.connect() as conn, pytest.raises(Exception, match="append-only"):
        conn.execute(text("DELETE FROM audit_events"))


def test_job_list_pagination_and_filters(api):
    import datetime as dt

    from clgate.store.db import session_scope
    from clgate.store.models import Job, Policy

    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    with session_scope(api.app.state.sessions) as s:
        p = Policy(name="p", version="1", document={}, sha256="0" * 64)
        s.add(p)
        s.flush()
        for i in range(5):
            s.add(
                Job(
                    mode="metrics" if i % 2 else "retrain",
                    queue="cpu" if i % 2 else "gpu",
                    model_name=f"m{i % 2}",
                    policy_id=p.id,
                    progress={},
                    state="succeeded" if i < 3 else "queued",
                    created_at=t0 + dt.timedelta(minutes=i),
                )
            )
    view = api.as_role("viewer")
    page = api.get("/v1/jobs", params={"skip": 1, "limit": 2}, headers=view).json()
    assert page["count"] == 5 and len(page["data"]) == 2
    assert [j["created_at"][:16] for j in page["data"]] == [
        "2026-01-01T00:03",
        "2026-01-01T00:02",
    ]  # newest first
    assert api.get("/v1/jobs", params={"model_name": "m1"}, headers=view).json()["count"] == 2
    assert api.get("/v1/jobs", params={"state": "queued"}, headers=view).json()["count"] == 2
    assert (
        api.get("/v1/jobs", params={"mode": "metrics", "state": "succeeded"}, headers=view).json()["count"]
        == 1
    )


def test_keys_belong_to_a_project(api):
    admin = api.as_role("admin")
    assert api.get("/v1/whoami", headers=api.as_role("viewer")).json()["project"] == "default"
    r = api.post("/v1/keys", json={"name": "b", "role": "viewer", "project": "Team B"}, headers=admin)
    assert r.status_code == 422 and "project" in r.json()["reason"]
    r = api.post("/v1/keys", json={"name": "b", "role": "viewer", "project": "team-b"}, headers=admin)
    assert r.status_code == 201 and r.json()["project"] == "team-b"
    listed = {k["name"]: k["project"] for k in api.get("/v1/keys", headers=admin).json()["data"]}
    assert listed["b"] == "team-b" and listed["t-viewer"] == "default"
    b = {"X-API-Key": r.json()["key"]}
    assert api.get("/v1/whoami", headers=b).json()["project"] == "team-b"
    trail = api.get("/v1/audit", headers=b).json()["data"]
    assert [e["action"] for e in trail] == ["key.created"] and trail[0]["project"] == "team-b"  # its own only
    assert api.get("/v1/audit", headers=admin).json()["count"] >= 4  # the admin reads every project's
