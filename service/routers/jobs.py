"""Jobs: submit (202 + id), get, list with filters and pagination, cancel, results, decision, re-gate,
waivers."""

from __future__ import annotations

import logging
import mimetypes
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, status
from fastapi.responses import FileResponse
from sqlalchemy.orm import Session

from clgate.schemas.api import (
    DecisionPublic,
    JobCreate,
    JobPublic,
    JobsPublic,
    Mode,
    RegateCreate,
    ResultFilePublic,
    ResultsPublic,
    State,
    Verdict,
    WaiverCreate,
    WaiverPublic,
    queue_for,
)
from clgate.schemas.job import JobSpec, JobSpecError
from clgate.service.deps import (
    Approver,
    DispatcherDep,
    SessionDep,
    SettingsDep,
    StoreDep,
    Submitter,
    Viewer,
    actor,
    scope,
)
from clgate.service.dispatch import Dispatcher
from clgate.service.errors import ApiError
from clgate.service.limits import MAX_SKIP
from clgate.service.submission import judge_inputs
from clgate.store import baselines, decisions, jobs, policies
from clgate.store.artifacts import ArtifactNotFound, ArtifactStore
from clgate.store.models import ApiKey, Job
from clgate.store.refs import check_paths, find_refs, resolve_refs
from clgate.store.scope import Scope
from clgate.store.settings import Settings

log = logging.getLogger("clgate.api")
router = APIRouter(prefix="/jobs", tags=["jobs"])

MEDIA = {
    ".md": "text/markdown; charset=utf-8",
    ".csv": "text/csv; charset=utf-8",
    ".json": "application/json",
    ".jsonl": "application/x-ndjson",
    ".xml": "application/xml",
    ".html": "text/html; charset=utf-8",
}


def _check_spec(
    session: Session, store: ArtifactStore, settings: Settings, where: Scope, body: JobCreate
) -> dict:
    spec = dict(body.spec or {})
    spec.setdefault("mode", body.mode)
    if spec["mode"] != body.mode:
        raise ApiError(422, f"spec.mode is {spec['mode']!r} but the job's mode is {body.mode!r}")
    problems = check_paths(spec)
    try:
        refs = set(find_refs(spec))
    except ValueError as exc:
        problems.append(f"spec: {exc}")
        refs = set()
    missing = sorted(r for r in refs if where.artifact(session, r) is None)
    problems += [f"spec: artifact sha256:{r} does not exist (upload it first)" for r in missing]
    if problems:
        raise ApiError(422, problems[0], problems=problems)
    try:
        job = JobSpec.parse(resolve_refs(spec, lambda digest: str(store.path(digest))))
    except JobSpecError as exc:
        problems = [f"spec.{p}" for p in exc.problems]
        raise ApiError(422, problems[0], problems=problems) from None
    problems = judge_inputs(job, settings)  # data sizes, archive listings, model file formats
    if problems:
        raise ApiError(422, problems[0], problems=problems)
    return spec


def _enqueue(session: Session, dispatcher: Dispatcher, job: Job) -> None:
    """Record the job and hand it to the executor, atomically for the client: it gets the id or no job exists.

    Celery: the message is sent inside the transaction that inserts the job and the transaction commits
    after; a failed send rolls back (503, no job), and a message that arrives before the commit waits for
    it (:data:`clgate.workers.runner.MISSING_GRACE_S`). Embedded: the job is committed, then submitted;
    if that fails it stays queued and the supervisor submits it again.
    """
    if dispatcher.kind == "embedded":
        session.commit()
        try:
            dispatcher.submit(job.id, job.queue)
        except Exception:
            log.warning("job %s: not handed to the executor yet; the supervisor will", job.id, exc_info=True)
        return
    try:
        dispatcher.submit(job.id, job.queue)
    except Exception as exc:
        session.rollback()
        raise ApiError(
            503, f"the job queue is unavailable ({type(exc).__name__}); no job was created"
        ) from None
    session.commit()


def _submit(
    session: Session,
    dispatcher: Dispatcher,
    key: ApiKey,
    idempotency_key: str | None,
    request: dict[str, Any],
    build: Callable[[Scope], tuple[Job, dict[str, Any]]],
) -> JobPublic:
    """The one path of a new job (submit and re-gate): an ``Idempotency-Key`` retry gets the first job;
    otherwise ``build`` checks the request and makes the job and its audit fields, and the job is recorded
    and handed to the executor."""
    where = scope(key)
    scoped, digest, earlier = jobs.idempotent(session, key.id, idempotency_key, request)
    if earlier is None:
        job, details = build(where)
        job.project, job.submitted_by, job.progress = where.project, actor(key), {}
        job.idempotency_key, job.request_sha256 = scoped, digest
        earlier, created = jobs.insert(session, job, actor=actor(key), details=details)
        if created:
            _enqueue(session, dispatcher, job)
    return JobPublic.model_validate(jobs.view(session, where, earlier.id))


IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        description="A retry with the same key (and the same body) returns the job "
        "the first request created instead of a second job.",
    ),
]


@router.post(
    "",
    response_model=JobPublic,
    status_code=status.HTTP_202_ACCEPTED,
    summary="Submit a job (retrain, evaluate or metrics-only)",
)
def submit_job(
    body: JobCreate,
    session: SessionDep,
    store: StoreDep,
    settings: SettingsDep,
    dispatcher: DispatcherDep,
    key: Submitter,
    idempotency_key: IdempotencyKey = None,
):
    def build(where: Scope) -> tuple[Job, dict[str, Any]]:
        where.model(session, body.model_name, claim=True)
        policy = policies.find(session, body.policy.name, body.policy.version, where.project)
        spec = None
        if body.mode == "metrics":
            missing = [
                r for r in body.logs or [] if where.artifact(session, r.removeprefix("sha256:")) is None
            ]
            if missing:
                raise ApiError(
                    422,
                    f"logs: artifact {missing[0]} does not exist (upload it first)",
                    problems=[f"logs: artifact {r} does not exist" for r in missing],
                )
        else:
            spec = _check_spec(session, store, settings, where, body)
        baseline = baselines.resolve(session, where, body.baseline, body.model_name)
        job = Job(
            mode=body.mode,
            queue=body.queue,
            model_name=body.model_name,
            spec=spec,
            logs=[r.removeprefix("sha256:") for r in body.logs] if body.logs else None,
            policy_id=policy.id,
            baseline_job_id=baseline,
            provenance=body.provenance().model_dump(mode="json", exclude_none=True),
        )
        details = {
            "mode": job.mode,
            "model_name": job.model_name,
            "policy": f"{policy.name}@{policy.version}",
            "baseline_job_id": baseline,
            **jobs.provenance_details(job.provenance),
        }
        return job, details

    request = {"submit": body.model_dump(mode="json")}
    return _submit(session, dispatcher, key, idempotency_key, request, build)


@router.get("", response_model=JobsPublic, summary="List jobs (newest first) with filters and pagination")
def list_jobs(
    session: SessionDep,
    key: Viewer,
    state: State | None = None,
    mode: Mode | None = None,
    model_name: str | None = None,
    verdict: Verdict | None = None,
    skip: Annotated[int, Query(ge=0, le=MAX_SKIP)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
):
    rows, count = jobs.page(
        session,
        scope(key),
        state=state,
        mode=mode,
        model_name=model_name,
        verdict=verdict,
        skip=skip,
        limit=limit,
    )
    return JobsPublic(data=[JobPublic.model_validate(r) for r in rows], count=count)


@router.get("/{job_id}", response_model=JobPublic, summary="One job: state, progress, timestamps, error")
def get_job(job_id: str, session: SessionDep, key: Viewer):
    return JobPublic.model_validate(jobs.view(session, scope(key), job_id))


@router.post(
    "/{job_id}/cancel",
    response_model=JobPublic,
    status_code=status.HTTP_202_ACCEPTED,
    summary="Cancel a job (queued: at once; running: at its next iteration, keeping a partial log)",
)
def cancel_job(job_id: str, session: SessionDep, key: Submitter):
    jobs.cancel(session, scope(key), job_id, actor=actor(key))
    session.commit()
    return JobPublic.model_validate(jobs.view(session, scope(key), job_id))


@router.get("/{job_id}/results", response_model=ResultsPublic, summary="The result files of a job")
def list_results(job_id: str, session: SessionDep, key: Viewer):
    files = jobs.result_files(session, scope(key), job_id)
    return ResultsPublic(job_id=job_id, files=[ResultFilePublic.model_validate(f) for f in files])


@router.get(
    "/{job_id}/results/{name:path}",
    response_class=FileResponse,
    summary=(
        "Download a result: log, metrics.json, decision.json, report.html, report.md, fmeca.csv, junit.xml"
    ),
)
def get_result(job_id: str, name: str, session: SessionDep, store: StoreDep, key: Viewer):
    row = jobs.result_file(session, scope(key), job_id, name)
    suffix = "." + row.name.rsplit(".", 1)[-1] if "." in row.name else ""
    media = MEDIA.get(suffix) or mimetypes.guess_type(row.name)[0] or "application/octet-stream"
    try:
        path = store.verified_path(row.sha256)  # hashed before it is served: a tampered file is refused
    except ArtifactNotFound:  # missing, or corrupt (quarantined)
        raise ApiError(
            404, f"job {job_id}: result {name!r} is not available (missing or failed its hash check)"
        ) from None
    return FileResponse(
        path, media_type=media, headers={"ETag": f'"{row.sha256}"'}, content_disposition_type="inline"
    )


@router.get(
    "/{job_id}/decision", response_model=DecisionPublic, summary="The job's gate decision and its waivers"
)
def get_decision(job_id: str, session: SessionDep, key: Viewer):
    return DecisionPublic.model_validate(decisions.view(session, scope(key), job_id))


@router.post(
    "/{job_id}/regate",
    response_model=JobPublic,
    status_code=status.HTTP_202_ACCEPTED,
    summary="Gate a finished job's logs under another policy version, without retraining",
)
def regate_job(
    job_id: str,
    body: RegateCreate,
    session: SessionDep,
    dispatcher: DispatcherDep,
    key: Submitter,
    idempotency_key: IdempotencyKey = None,
):
    def build(where: Scope) -> tuple[Job, dict[str, Any]]:
        source = jobs.regate_source(session, where, job_id)
        policy = policies.find(session, body.policy.name, body.policy.version, where.project)
        baseline = (
            source.baseline_job_id
            if body.baseline == "same"
            else baselines.resolve(session, where, body.baseline, source.model_name)
        )
        job = Job(
            mode="regate",
            queue=queue_for("regate"),
            model_name=source.model_name,
            policy_id=policy.id,
            baseline_job_id=baseline,
            source_job_id=source.id,
            provenance=source.provenance,  # the same build, judged again
        )
        details = {
            "mode": "regate",
            "source_job_id": source.id,
            "policy": f"{policy.name}@{policy.version}",
            "baseline_job_id": baseline,
        }
        return job, details

    request = {"regate": job_id, **body.model_dump(mode="json")}
    return _submit(session, dispatcher, key, idempotency_key, request, build)


@router.post(
    "/{job_id}/waivers",
    response_model=WaiverPublic,
    status_code=status.HTTP_201_CREATED,
    summary="Record a justified waiver of a FAIL (the decision itself is never edited)",
)
def create_waiver(job_id: str, body: WaiverCreate, session: SessionDep, key: Approver):
    w = decisions.waive(
        session, scope(key), job_id, justification=body.justification, expires_at=body.expires_at
    )
    session.commit()
    return WaiverPublic.model_validate(w)


@router.get("/{job_id}/waivers", response_model=list[WaiverPublic], summary="Waivers of the job's decision")
def list_waivers(job_id: str, session: SessionDep, key: Viewer):
    return [WaiverPublic.model_validate(w) for w in decisions.waivers(session, scope(key), job_id)]
