"""Signed webhooks: each decision (and waiver) of a project, POSTed as JSON to the URLs it registered.

Signature: ``X-Clgate-Signature: sha256=<hex HMAC-SHA256(secret, timestamp + "." + body)>`` with the
Unix time in ``X-Clgate-Timestamp`` (a receiver refuses old timestamps to stop replays); also
``X-Clgate-Event`` and ``X-Clgate-Delivery`` (the delivery id: the same on every retry of one event).
A receiver that answers 2xx has it; anything else (or no answer) is retried with exponential back-off,
and every attempt is in the delivery log. Nothing here can change a decision: delivery runs after the
decision is recorded, in the API process, from the store's delivery table.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
import time
from typing import Any

import httpx

from clgate.store import Store
from clgate.store import webhooks as records
from clgate.store.settings import Settings

log = logging.getLogger("clgate.webhooks")
FORMATS = ("clgate", "slack", "mlflow")


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """The ``X-Clgate-Signature`` value of ``body`` sent at ``timestamp``.

    >>> signature("s3cret", "1700000000", b'{"event": "decision"}')
    'sha256=afc4bfae7f9ac056b2de5f729bc2dc88c2893072cfe0f76868dfbd7ed9af0229'
    """
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def verify(secret: str, timestamp: str, body: bytes, header: str, *, max_age_s: float = 300.0) -> bool:
    """What a receiver does: the signature matches and the timestamp is recent (constant-time compare)."""
    try:
        fresh = abs(time.time() - int(timestamp)) <= max_age_s
    except ValueError:
        return False
    return fresh and hmac.compare_digest(signature(secret, timestamp, body), header)


def render(payload_format: str, body: str) -> bytes:
    """The bytes sent: the event JSON as stored, or a chat message (Slack and Teams incoming webhooks
    read ``{"text": …}``) that keeps the event under ``clgate``."""
    if payload_format != "slack":
        return body.encode()
    event: dict[str, Any] = json.loads(body)
    if event.get("event") == "waiver":
        text = (
            f"clgate: FAIL of job {event.get('job_id')} ({event.get('model_name')}) waived by "
            f"{event.get('approver')}: {event.get('justification')}"
        )
    else:
        text = (
            f"clgate: *{event.get('verdict')}* for {event.get('model_name')} "
            f"(policy {event.get('policy')}, job {event.get('job_id')}): {event.get('summary')}"
        )
    return json.dumps({"text": text, "clgate": event}, sort_keys=True).encode()


def backoff_s(attempts: int, base_s: float, max_s: float = 3600.0) -> float:
    """Seconds before the next attempt after ``attempts`` failed ones: base, 2×base, 4×base …

    >>> [backoff_s(n, 2.0) for n in (1, 2, 3, 4)]
    [2.0, 4.0, 8.0, 16.0]
    """
    return min(max_s, base_s * 2 ** (attempts - 1))


def to_mlflow(store: Store, due: records.Due) -> tuple[int | None, str | None]:
    """The ``mlflow`` format: the decision logged to the tracking server at the webhook's URL, in the
    experiment ``clgate-<project>`` (metrics, verdict and rule tags, decision.json and metrics.json as
    artifacts); a waiver is a no-op. (200, None) when logged, (None, why) otherwise."""
    if due.event != "decision":
        return 200, None
    try:
        run_id = _log_to_mlflow(store, due.url, json.loads(due.body)["job_id"])
    except Exception as exc:  # MLflow down, a record missing …: an attempt that failed, retried later
        return None, f"{type(exc).__name__}: {exc}"[:1000]
    log.info("decision logged to MLflow run %s", run_id)
    return 200, None


def _log_to_mlflow(store: Store, tracking_uri: str, job_id: str) -> str:
    import tempfile
    from pathlib import Path

    # lazy: mlflow — the optional clgate[mlflow] extra, only for webhooks with payload_format mlflow
    from clgate.integrations.mlflow import log_decision
    from clgate.schemas.decision import Decision
    from clgate.schemas.metrics import RunsResult

    document, metrics_path, project = records.decision_files(store, job_id)
    decision = Decision.model_validate({k: v for k, v in document.items() if k != "sha256"})
    metrics = None
    if metrics_path:  # metrics.json: {"format", "runs": <RunsResult>, "baseline"}
        stored = json.loads(Path(metrics_path).read_text())
        metrics = RunsResult.model_validate(stored.get("runs", stored))
    with tempfile.TemporaryDirectory(prefix="clgate-mlflow-") as scratch:
        (Path(scratch) / "decision.json").write_text(json.dumps(document, indent=2))
        if metrics_path:
            (Path(scratch) / "metrics.json").write_text(Path(metrics_path).read_text())
        outcome = log_decision(
            decision, metrics, Path(scratch), tracking_uri=tracking_uri, experiment=f"clgate-{project}"
        )
    return outcome.run_id


def attempt(client: httpx.Client, due: records.Due) -> tuple[int | None, str | None]:
    """POST one delivery; (status code, None) on a 2xx, (status or None, why) otherwise."""
    body = render(due.payload_format, due.body)
    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "clgate-webhooks",
        "X-Clgate-Event": due.event,
        "X-Clgate-Delivery": due.id,
        "X-Clgate-Timestamp": timestamp,
        "X-Clgate-Signature": signature(due.secret, timestamp, body),
    }
    try:
        r = client.post(due.url, content=body, headers=headers)
    except httpx.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}"[:1000]
    if 200 <= r.status_code < 300:
        return r.status_code, None
    return r.status_code, f"HTTP {r.status_code}: {r.text[:500]}"


def deliver_due(store: Store, client: httpx.Client, *, max_attempts: int, backoff_base_s: float) -> int:
    """Attempt every due delivery once; returns how many were attempted."""
    due = records.claim_due(store, limit=50, lease_s=max(30.0, client.timeout.read or 10.0) * 2)
    for d in due:
        status, error = to_mlflow(store, d) if d.payload_format == "mlflow" else attempt(client, d)
        tries = d.attempts + 1
        retry = None if error is None or tries >= max_attempts else backoff_s(tries, backoff_base_s)
        records.record_attempt(store, d.id, status_code=status, error=error, retry_in_s=retry)
        if error is not None:
            log.warning("webhook %s delivery %s attempt %d: %s", d.webhook_id, d.id, tries, error)
    return len(due)


class DeliveryLoop:
    """A daemon thread of the API process that sends due deliveries every ``interval_s`` seconds."""

    def __init__(
        self, store: Store, *, interval_s: float, max_attempts: int, backoff_base_s: float, timeout_s: float
    ) -> None:
        self.store, self.interval_s = store, interval_s
        self.max_attempts, self.backoff_base_s = max_attempts, backoff_base_s
        self._client = httpx.Client(timeout=timeout_s, follow_redirects=False)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="clgate-webhooks", daemon=True)

    def start(self) -> DeliveryLoop:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                deliver_due(
                    self.store,
                    self._client,
                    max_attempts=self.max_attempts,
                    backoff_base_s=self.backoff_base_s,
                )
            except Exception:  # a database hiccup: logged, tried again at the next tick
                log.warning("webhook delivery pass failed", exc_info=True)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._client.close()


def start_webhooks(store: Store, settings: Settings) -> DeliveryLoop:
    """The API process's delivery loop, with the settings' interval, back-off, attempts and timeout."""
    return DeliveryLoop(
        store,
        interval_s=settings.webhook_interval_s,
        max_attempts=settings.webhook_max_attempts,
        backoff_base_s=settings.webhook_backoff_s,
        timeout_s=settings.webhook_timeout_s,
    ).start()
