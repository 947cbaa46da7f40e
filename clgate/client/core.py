"""``Client``: the clgate service API (``/v1``) from Python, over httpx, answers typed with the schemas.

>>> client = Client("http://127.0.0.1:1", "clg_example")
>>> client.url
'http://127.0.0.1:1'
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from clgate.client.specs import load_document, prepare_spec
from clgate.policy import PolicyError
from clgate.provenance import build_info
from clgate.schemas.api import (
    ArtifactPublic,
    BaselinePublic,
    BaselinesPublic,
    BuildInfo,
    DecisionPublic,
    JobCreate,
    JobPublic,
    JobsPublic,
    PoliciesPublic,
    PolicyRef,
    PolicyVersionPublic,
    ResultsPublic,
    WaiverPublic,
    WhoAmI,
)
from clgate.schemas.errors import problems_of

M = TypeVar("M", bound=BaseModel)
TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
YAML_SUFFIXES = (".yaml", ".yml")


class ClientError(Exception):
    """Base of the client's errors."""


class ApiError(ClientError):
    """The service refused or failed a request: ``status``, its ``reason`` and per-field ``problems``."""

    def __init__(self, status: int, reason: str, problems: list[str] | None = None) -> None:
        super().__init__(f"{status}: {reason}")
        self.status, self.reason, self.problems = status, reason, problems or []


class Unreachable(ClientError):
    """No answer from the service (refused connection, DNS, timeout)."""


class WaitTimeout(ClientError):
    """The job did not finish within the wait's timeout; ``job`` is its last state."""

    def __init__(self, job: JobPublic, timeout: float) -> None:
        super().__init__(f"job {job.id} still {job.state} after {timeout:g}s")
        self.job = job


class Client:
    """The service at ``url`` (default ``$CLGATE_URL``) with the API key ``api_key``
    (default ``$CLGATE_API_KEY``). ``transport``: an httpx transport (tests pass an ASGI one)."""

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        url = url or os.environ.get("CLGATE_URL")
        if not url:
            raise ClientError("no service URL: pass url= or set CLGATE_URL (e.g. http://127.0.0.1:8000)")
        key = api_key if api_key is not None else os.environ.get("CLGATE_API_KEY")
        self.url = url.rstrip("/")
        headers = {"X-API-Key": key} if key else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------ transport
    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One API call; a 4xx/5xx raises :class:`ApiError`, no answer :class:`Unreachable`."""
        try:
            response = self._http.request(method, "/v1" + path, **kwargs)
        except httpx.TransportError as exc:
            why = str(exc) or type(exc).__name__
            raise Unreachable(f"cannot reach the clgate service at {self.url}: {why}") from None
        if response.status_code >= 400:
            try:
                body = response.json()
                reason, problems = str(body.get("reason") or body), list(body.get("problems") or [])
            except (ValueError, AttributeError):
                reason, problems = response.text[:500] or response.reason_phrase, []
            raise ApiError(response.status_code, reason, problems)
        return response

    def _get(self, model: type[M], path: str, **kwargs: Any) -> M:
        return model.model_validate(self.request("GET", path, **kwargs).json())

    def _send(self, model: type[M], method: str, path: str, **kwargs: Any) -> M:
        return model.model_validate(self.request(method, path, **kwargs).json())

    # ------------------------------------------------------------------------------------------ records
    def whoami(self) -> WhoAmI:
        return self._get(WhoAmI, "/whoami")

    def upload(self, path: str | Path, kind: str = "other") -> ArtifactPublic:
        """Upload a file (streamed); the same content uploaded twice is one artifact."""
        path = Path(path)
        with path.open("rb") as f:
            return self._send(
                ArtifactPublic, "POST", "/artifacts", params={"kind": kind, "filename": path.name}, content=f
            )

    def create_policy(self, policy: str | Path | dict[str, Any]) -> PolicyVersionPublic:
        """Publish a policy version: a YAML/JSON file (sent as it is written) or a mapping."""
        if isinstance(policy, dict):
            return self._send(PolicyVersionPublic, "POST", "/policies", json=policy)
        path = Path(policy)
        yaml = path.suffix.lower() in YAML_SUFFIXES
        try:
            content = path.read_bytes()
        except OSError as exc:
            raise PolicyError([f"cannot read file: {exc.strerror or exc}"], str(path)) from None
        headers = {"Content-Type": "application/yaml" if yaml else "application/json"}
        return self._send(PolicyVersionPublic, "POST", "/policies", content=content, headers=headers)

    def policies(self, name: str | None = None) -> PoliciesPublic:
        return self._get(PoliciesPublic, "/policies", params={"name": name} if name else None)

    def policy(self, name: str, version: str) -> PolicyVersionPublic:
        return self._get(PolicyVersionPublic, f"/policies/{name}/{version}")

    def baselines(self) -> BaselinesPublic:
        return self._get(BaselinesPublic, "/baselines")

    def set_baseline(self, model_name: str, job_id: str) -> BaselinePublic:
        return self._send(BaselinePublic, "PUT", f"/baselines/{model_name}", json={"job_id": job_id})

    # ------------------------------------------------------------------------------------------ jobs
    def submit(
        self, job: JobCreate | dict[str, Any], *, idempotency_key: str | None = None, ci_build: bool = True
    ) -> JobPublic:
        """Submit a job body (:class:`JobCreate`); files must be uploaded already.

        A body without ``build`` gets the build read from the CI's variables (``GITHUB_SHA`` …, as
        ``clgate gate`` reads them: :func:`clgate.provenance.build_info`) unless ``ci_build=False``, so the
        service's decision names the commit and CI run it certifies."""
        try:
            body = job if isinstance(job, JobCreate) else JobCreate.model_validate(job)
        except ValidationError as exc:
            raise ClientError("; ".join(problems_of(exc))) from None
        if body.build is None and ci_build:
            body = body.model_copy(update={"build": self._ci_build()})
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        payload = body.model_dump(mode="json", exclude_none=True)
        return self._send(JobPublic, "POST", "/jobs", json=payload, headers=headers)

    @staticmethod
    def _ci_build() -> BuildInfo | None:
        try:
            found = build_info(os.environ)
        except ValueError as exc:
            raise ClientError(str(exc)) from None
        return BuildInfo.model_validate(found) if found else None

    def submit_spec(
        self,
        spec: str | Path,
        *,
        model_name: str,
        policy: PolicyRef | str,
        baseline: str = "model",
        candidate_version: str | None = None,
        idempotency_key: str | None = None,
    ) -> JobPublic:
        """Submit a local job spec file (YAML/JSON): the files it names are uploaded first.
        ``model_name`` is the candidate's name, ``candidate_version`` its version."""
        path = Path(spec)
        document = prepare_spec(load_document(path), path.parent, lambda p, kind: self.upload(p, kind).ref)
        mode = document.setdefault("mode", "retrain")
        body = {"mode": mode, "model_name": model_name, "policy": _ref(policy), "spec": document}
        body.update(_versioned(baseline, candidate_version))
        return self.submit(body, idempotency_key=idempotency_key)

    def submit_logs(
        self,
        logs: list[str | Path],
        *,
        model_name: str,
        policy: PolicyRef | str,
        baseline: str = "model",
        candidate_version: str | None = None,
        idempotency_key: str | None = None,
    ) -> JobPublic:
        """Submit evaluation logs for metrics and the gate (metrics mode): they are uploaded first.
        ``model_name`` is the candidate's name, ``candidate_version`` its version."""
        refs = [self.upload(p, "log").ref for p in logs]
        body = {"mode": "metrics", "model_name": model_name, "policy": _ref(policy), "logs": refs}
        body.update(_versioned(baseline, candidate_version))
        return self.submit(body, idempotency_key=idempotency_key)

    def job(self, job_id: str) -> JobPublic:
        return self._get(JobPublic, f"/jobs/{job_id}")

    def jobs(self, **filters: Any) -> JobsPublic:
        """Jobs, newest first; filters: state, mode, model_name, verdict, skip, limit."""
        return self._get(JobsPublic, "/jobs", params={k: v for k, v in filters.items() if v is not None})

    def cancel(self, job_id: str) -> JobPublic:
        return self._send(JobPublic, "POST", f"/jobs/{job_id}/cancel")

    def wait(
        self,
        job_id: str,
        *,
        timeout: float = 3600.0,
        poll_s: float = 1.0,
        on_progress: Callable[[JobPublic], None] | None = None,
    ) -> JobPublic:
        """The job once it is succeeded, failed or cancelled; ``on_progress`` sees every poll."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if on_progress is not None:
                on_progress(job)
            if job.state in TERMINAL:
                return job
            if time.monotonic() >= deadline:
                raise WaitTimeout(job, timeout)
            time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))

    def decision(self, job_id: str) -> DecisionPublic:
        return self._get(DecisionPublic, f"/jobs/{job_id}/decision")

    def results(self, job_id: str) -> ResultsPublic:
        return self._get(ResultsPublic, f"/jobs/{job_id}/results")

    def download(self, job_id: str, name: str, dest: str | Path) -> Path:
        """Save the job's result ``name`` (``decision.json``, ``report.html`` …) to ``dest``."""
        dest = Path(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(self.request("GET", f"/jobs/{job_id}/results/{name}").content)
        return dest

    def download_all(self, job_id: str, out_dir: str | Path) -> list[Path]:
        """Every result file of the job under ``out_dir`` (sub-folders such as ``logs/`` kept)."""
        out = Path(out_dir)
        saved = []
        for f in self.results(job_id).files:
            target = (out / f.name).resolve()
            if not target.is_relative_to(out.resolve()):
                raise ClientError(f"result name {f.name!r} leaves {out}; not saved")
            saved.append(self.download(job_id, f.name, target))
        return saved

    def waive(self, job_id: str, justification: str, *, expires_at: str | None = None) -> WaiverPublic:
        body = {"justification": justification, **({"expires_at": expires_at} if expires_at else {})}
        return self._send(WaiverPublic, "POST", f"/jobs/{job_id}/waivers", json=body)


def _versioned(baseline: str, candidate_version: str | None) -> dict[str, Any]:
    """The body's ``baseline`` and, when given, ``candidate_version``."""
    return {"baseline": baseline, **({"candidate_version": candidate_version} if candidate_version else {})}


def _ref(policy: PolicyRef | str) -> dict[str, str]:
    """``NAME@VERSION`` (or a :class:`PolicyRef`) as the API's policy reference."""
    if isinstance(policy, PolicyRef):
        return policy.model_dump()
    name, sep, version = policy.rpartition("@")
    if not sep or not name or not version:
        raise ClientError(f"policy: expected NAME@VERSION, got {policy!r}")
    return {"name": name, "version": version}
