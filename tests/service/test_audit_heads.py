"""The signed heads (``GET /v1/audit/heads``) and the history's length on ``/metrics`` count every
project's records: only a ``global_admin`` key gets them; a key of one project — its admin included — is
refused with a reason (403), its ``/metrics`` leaves ``clgate_history_entries`` out, and its audit trail
comes without the deployment's event numbers."""

from __future__ import annotations

import subprocess
import sys

import pytest

from clgate.store import history

pytestmark = pytest.mark.integration


@pytest.fixture
def team_b(api):
    """Headers of a viewer and an admin key of project ``team-b`` (the fixture's keys are ``default``'s)."""
    keys = {}
    for role in ("viewer", "admin"):
        r = api.post(
            "/v1/keys",
            json={"name": f"b-{role}", "role": role, "project": "team-b"},
            headers=api.as_role("admin"),
        )
        assert r.status_code == 201 and r.json()["project"] == "team-b", r.text
        keys[role] = {"X-API-Key": r.json()["key"]}
    return keys


def test_a_project_key_is_refused_the_deployments_heads(api, team_b):
    for who, headers in (
        ("team-b viewer", team_b["viewer"]),
        ("team-b admin", team_b["admin"]),
        ("default viewer", api.as_role("viewer")),
        ("default approver", api.as_role("approver")),
    ):
        r = api.get("/v1/audit/heads", headers=headers)
        assert r.status_code == 403, (who, r.text)
        body = r.json()
        assert body["error"] == "forbidden" and "global_admin" in body["reason"], (who, body)
        assert "heads" not in body and "public_key" not in body, (who, body)


def test_a_global_admin_key_gets_every_familys_signed_head(api, team_b):
    r = api.get("/v1/audit/heads", headers=api.as_role("admin"))  # the bootstrap key: global_admin
    assert r.status_code == 200, r.text
    heads = {h["family"]: h["length"] for h in r.json()["heads"]}
    assert set(heads) == set(history.FAMILIES)
    assert heads["api_keys"] >= 5  # the fixture's three keys, team-b's two: every project's count


def test_a_project_keys_metrics_leave_out_the_historys_length(api, team_b):
    everything = api.get("/metrics", headers=api.as_role("admin"))
    assert everything.status_code == 200
    assert 'clgate_history_entries{family="api_keys"}' in everything.text
    for headers in (team_b["viewer"], team_b["admin"], api.as_role("viewer")):
        text = api.get("/metrics", headers=headers).text
        assert "clgate_history_entries" not in text, text
        assert "clgate_jobs{" in text  # the other series without a project label stay


def test_a_project_keys_audit_trail_does_not_number_the_deployments_events(api, team_b):
    """Audit events carry the deployment's numbering (``id`` and the chain's ``seq``): gaps between a
    project's own events would count the other projects'. A project's key gets its events without them."""
    for headers in (team_b["viewer"], team_b["admin"]):
        events = api.get("/v1/audit", headers=headers).json()["data"]
        assert events and all(e["project"] == "team-b" for e in events), events
        assert all(e["id"] is None and e["seq"] is None and e["record_hash"] for e in events), events
    everything = api.get("/v1/audit", headers=api.as_role("admin")).json()["data"]
    seqs = [e["seq"] for e in everything]
    assert all(isinstance(n, int) for n in seqs) and seqs == sorted(seqs, reverse=True), seqs
    assert all(isinstance(e["id"], int) for e in everything)


@pytest.mark.timeout(300)
def test_audit_verify_fetches_the_heads_with_a_global_admin_key(embedded_service):
    """`clgate audit verify --head URL` against a running `clgate serve`: the global_admin key in
    CLGATE_API_KEY gets heads that verify; a project's key is refused with the API's reason (exit 2)."""
    svc = embedded_service
    url = svc.url + "/v1/audit/heads"

    def verify(client) -> subprocess.CompletedProcess:
        env = {**svc.env, "CLGATE_API_KEY": client.headers["X-API-Key"]}
        argv = [sys.executable, "-m", "clgate", "audit", "verify", "--head", url]
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)

    ok = verify(svc.clients["admin"])
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "ok history api_keys" in ok.stdout, ok.stdout
    refused = verify(svc.clients["viewer"])
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "--head" in refused.stderr and "HTTP 403" in refused.stderr, refused.stderr
    assert "global_admin" in refused.stderr, refused.stderr
