"""The API reads policies and job submissions sent as YAML; bad YAML is a 422 that says where."""

from __future__ import annotations

import pytest
import yaml

POLICY_YAML = """\
name: yaml-policy
version: "1"
rules:
  - metric: acc
    floor: 0.5
"""


@pytest.mark.parametrize("media", ["application/yaml", "text/yaml", "application/x-yaml; charset=utf-8"])
def test_yaml_policy_is_created(api, media):
    r = api.post(
        "/v1/policies", content=POLICY_YAML, headers={**api.as_role("approver"), "Content-Type": media}
    )
    assert r.status_code in (200, 201), r.text
    assert r.json()["name"] == "yaml-policy" and r.json()["document"]["rules"][0]["floor"] == 0.5


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        pytest.param("name: [unclosed\n", 422, "not valid YAML (line 2", id="syntax"),
        pytest.param("a: &x [1]\nb: *x\n", 422, "anchors and aliases are not accepted", id="alias"),
        pytest.param("name: p\nversion: 1\nrules: []\n", 422, "rules", id="field"),
        pytest.param("k: " + "v" * (2 * 1024 * 1024) + "\n", 413, "larger than", id="too-large"),
    ],
)
def test_bad_yaml_is_refused_with_the_reason(api, body, status, says):
    headers = {**api.as_role("approver"), "Content-Type": "application/yaml"}
    r = api.post("/v1/policies", content=body, headers=headers)
    assert r.status_code == status, r.text
    assert says in r.json()["reason"] + " ".join(r.json()["problems"])


def test_yaml_job_submission_is_validated_like_json(api):
    headers = {**api.as_role("approver"), "Content-Type": "application/yaml"}
    assert api.post("/v1/policies", content=POLICY_YAML, headers=headers).status_code in (200, 201)
    job = {
        "mode": "retrain",
        "model_name": "m",
        "policy": {"name": "yaml-policy", "version": "1"},
        "spec": {"data": "digits", "scenario": {"n_tasks": 0}},
    }
    headers = {**api.as_role("submitter"), "Content-Type": "application/yaml"}
    r = api.post("/v1/jobs", content=yaml.safe_dump(job), headers=headers)
    assert r.status_code == 422, r.text
    assert any(p.startswith("spec.scenario") for p in r.json()["problems"]), r.json()
