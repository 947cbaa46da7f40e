"""Signed webhooks through the API (lifespan and delivery loop running) to receivers this test runs on
127.0.0.1: the signature verifies, a 500 is retried, nothing is lost, a receiver that is down changes
nothing in the decision and ends in the delivery log as failed."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from clgate.integrations.webhooks import backoff_s, render, signature, verify
from tests.fixtures.service import free_port


class Receiver:
    """An HTTP server that records each POST and answers the statuses in ``answers`` (then 200)."""

    def __init__(self, answers: list[int]) -> None:
        self.received: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.received.append({"headers": dict(self.headers), "body": body})
                self.send_response(answers.pop(0) if answers else 200)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events(self, event: str) -> list[dict]:
        return [r for r in self.received if r["headers"]["X-Clgate-Event"] == event]


@pytest.fixture
def webhook_api(app_factory, test_client_class):
    app, _ = app_factory(webhook_interval_s=0.1, webhook_backoff_s=0.2, webhook_max_attempts=3)
    with test_client_class(app) as client:
        yield client


def until(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.05)


def test_decisions_and_waivers_are_signed_retried_and_logged(
    webhook_api, admin_key, example_log, gate_example_log
):
    api, admin = webhook_api, {"X-API-Key": admin_key}
    receiver, chat = Receiver([500]), Receiver([])
    created = api.post("/v1/webhooks", json={"url": receiver.url}, headers=admin)
    assert created.status_code == 201, created.text
    hook, secret = created.json(), created.json()["secret"]
    slack = api.post(
        "/v1/webhooks",
        json={"url": chat.url, "payload_format": "slack", "events": ["decision"]},
        headers=admin,
    ).json()
    down = api.post("/v1/webhooks", json={"url": f"http://127.0.0.1:{free_port()}/x"}, headers=admin).json()

    job = gate_example_log(api, admin, example_log)
    assert job["state"] == "succeeded" and job["verdict"] == "FAIL"  # the receivers change nothing
    r = api.post("/v1/keys", json={"name": "approver", "role": "approver"}, headers=admin)
    approver = {"X-API-Key": r.json()["key"]}
    waiver = api.post(
        f"/v1/jobs/{job['id']}/waivers",
        headers=approver,
        json={"justification": "known weakness on class 3, fixed in the next release"},
    )
    assert waiver.status_code == 201, waiver.text

    until(lambda: len(receiver.events("decision")) == 2 and len(receiver.events("waiver")) == 1)
    for request in receiver.received:  # the receiver's check, as documented
        h = request["headers"]
        assert verify(secret, h["X-Clgate-Timestamp"], request["body"], h["X-Clgate-Signature"])
        assert not verify("another secret", h["X-Clgate-Timestamp"], request["body"], h["X-Clgate-Signature"])
    first, retry = receiver.events("decision")
    assert first["headers"]["X-Clgate-Delivery"] == retry["headers"]["X-Clgate-Delivery"]  # one event, twice
    event = json.loads(retry["body"])
    assert (event["event"], event["job_id"], event["verdict"]) == ("decision", job["id"], "FAIL")
    assert json.loads(receiver.events("waiver")[0]["body"])["approver"].startswith("key:")

    log = api.get(f"/v1/webhooks/{hook['id']}/deliveries", headers=admin).json()
    by_event = {d["event"]: d for d in log["data"]}
    assert by_event["decision"]["status"] == "delivered" and by_event["decision"]["attempts"] == 2
    assert by_event["decision"]["last_status_code"] == 200 and by_event["waiver"]["status"] == "delivered"

    until(lambda: len(chat.received) == 1)
    assert "*FAIL*" in json.loads(chat.received[0]["body"])["text"]
    until(
        lambda: (
            api.get(f"/v1/webhooks/{down['id']}/deliveries", headers=admin).json()["data"][0]["status"]
            == "failed"
        )
    )
    failed = api.get(f"/v1/webhooks/{down['id']}/deliveries", headers=admin).json()["data"]
    assert all(
        d["attempts"] == 3 and "ConnectError" in d["last_error"] for d in failed if d["status"] == "failed"
    )
    assert api.get(f"/v1/jobs/{job['id']}", headers=admin).json()["verdict"] == "FAIL"
    assert slack["payload_format"] == "slack"


def test_webhooks_need_admin_and_an_http_url(webhook_api, admin_key):
    api = webhook_api
    r = api.post("/v1/keys", json={"name": "a", "role": "approver"}, headers={"X-API-Key": admin_key})
    approver = {"X-API-Key": r.json()["key"]}
    assert api.post("/v1/webhooks", json={"url": "http://127.0.0.1:9/x"}, headers=approver).status_code == 403
    bad = api.post("/v1/webhooks", json={"url": "file:///etc/passwd"}, headers={"X-API-Key": admin_key})
    assert bad.status_code == 422 and "url" in bad.text


def test_signature_and_backoff():
    body = render("clgate", '{"event": "decision"}')
    ts = str(int(time.time()))
    assert verify("k", ts, body, signature("k", ts, body))
    assert not verify(
        "k", str(int(time.time()) - 3600), body, signature("k", str(int(time.time()) - 3600), body)
    )
    assert [backoff_s(n, 1.0, max_s=5.0) for n in range(1, 6)] == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_the_decision_event_names_the_candidates_build():
    from clgate.store.jobs import decision_event
    from clgate.store.models import Job

    document = {"policy_name": "p", "policy_version": "1", "summary": "PASS", "headline": {"acc": 0.9}}
    build = {"ci": "github", "commit": "1f2e3d4", "run_url": "https://github.com/acme/vision/actions/runs/42"}
    job = Job(id="j1", project="default", model_name="digits-mlp")
    job.provenance = {"candidate": {"name": "digits-mlp", "version": "2.4.0"}, "build": build}
    event = decision_event(job, "PASS", document)
    assert event["candidate"] == "digits-mlp" and event["candidate_version"] == "2.4.0"
    assert event["build"] == build and event["policy"] == "p@1" and event["verdict"] == "PASS"

    job.provenance = None  # a job submitted without them: the event has no such keys
    assert not {"candidate", "candidate_version", "build"} & decision_event(job, "FAIL", document).keys()
