"""Request and response models of the clgate service API (``/v1``), separate from the database records.

Job submissions refer to uploaded artifacts by content hash. Anywhere in a job spec, the object
``{"artifact": "sha256:<64 hex>"}`` stands for the file of that artifact; the worker replaces it with
the artifact's local path before the engine sees the spec. Specs sent over the API cannot name
server paths.

>>> JobCreate.model_validate({"mode": "metrics", "model_name": "digits-mlp",
...     "policy": {"name": "default", "version": "1"}, "logs": ["sha256:" + "a" * 64]}).queue
'cpu'
>>> JobCreate.model_validate({"mode": "metrics", "model_name": "digits mlp",
...     "policy": {"name": "p", "version": "1"}, "logs": []})
Traceback (most recent call last):
...
pydantic_core._pydantic_core.ValidationError: 1 validation error for JobCreate
...
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from clgate.schemas.vocab import ENGINE_MODES, EngineMode, Queue, Verdict, queue_for
from clgate.schemas.vocab import JobMode as Mode
from clgate.schemas.vocab import JobStateName as State
from clgate.schemas.vocab import RoleName as Role


def _utc(value: dt.datetime) -> dt.datetime:
    """A stored time is UTC; SQLite hands it back naive, so it is marked UTC before it is answered."""
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


UtcDatetime = Annotated[
    dt.datetime, AfterValidator(_utc), Field(description="RFC 3339 date-time in UTC, always with its offset.")
]

ArtifactKind = Literal["model", "data", "log", "spec", "result", "other"]

ModelName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=120,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="Letters, digits, '.', '_', '-' (a Prometheus label value: keep the set of names small).",
    ),
]
Project = Annotated[
    str,
    Field(
        pattern=r"^[a-z0-9][a-z0-9-]{0,62}$",
        description="A team's project: lower-case letters, digits and '-'. Keys see only their project's "
        "records (admin keys: every project's).",
    ),
]
ArtifactRef = Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$", description="sha256:<64 hex digits>")]

GPU_MODES = frozenset(ENGINE_MODES)  # the modes queued on ``gpu`` (see clgate.schemas.vocab.queue_for)


ERROR_CODES: dict[int, str] = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    411: "length_required",
    413: "too_large",
    415: "unsupported_media_type",
    422: "invalid",
    500: "internal",
    503: "unavailable",
}
"""The stable ``error`` code of each HTTP status the API answers with."""


class ErrorBody(BaseModel):
    """Every error answer: a stable code, a sentence saying why, and the individual problems (field:
    reason)."""

    error: str = Field(description="Stable code: " + ", ".join(sorted(set(ERROR_CODES.values()))))
    reason: str
    problems: list[str] = Field(default_factory=list)


class FromRecord(BaseModel):
    """A response built from a stored record (or a store view of one) by ``Model.model_validate(record)``:
    fields are read as the record's attributes."""

    model_config = ConfigDict(from_attributes=True)


class PolicyRef(BaseModel):
    model_config = ConfigDict(extra="forbid", from_attributes=True)

    name: str = Field(min_length=1, max_length=200)
    version: str = Field(min_length=1, max_length=64)


class ArtifactPublic(FromRecord):
    sha256: str
    ref: str
    size: int
    kind: str
    filename: str | None
    created_at: UtcDatetime
    created_by: str | None


class ArtifactsPublic(BaseModel):
    data: list[ArtifactPublic]
    count: int


CiName = Literal["github", "gitlab", "jenkins", "buildkite", "other"]


class BuildInfo(BaseModel):
    """The build a verdict certifies: its source commit and the CI run that built it — the shape
    ``clgate.provenance.build_info`` reads from the CI's variables (and validates against this model).

    >>> BuildInfo(ci="github", commit="1f2e3d4", run_url="https://github.com/acme/vision/actions/runs/42").ci
    'github'
    """

    model_config = ConfigDict(extra="forbid")

    commit: str = Field(pattern=r"^[0-9a-fA-F]{7,64}$", description="Source commit: 7 to 64 hex digits.")
    ci: CiName = Field("other", description="The CI that ran the build: " + ", ".join(get_args(CiName)) + ".")
    run_url: str | None = Field(
        None,
        max_length=2000,
        pattern=r"^https?://[^\s/]+(/\S*)?$",
        description="http(s) address of the CI run.",
    )
    ref: str | None = Field(
        None, min_length=1, max_length=255, pattern=r"^\S+$", description="Branch or tag (no spaces)."
    )


CandidateVersion = Annotated[
    str,
    Field(
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._+:/-]*$",
        description="The candidate's version (a release number, a commit): letters, digits and '._+:/-'.",
    ),
]


class CandidatePublic(BaseModel):
    name: str
    version: str | None = None


class JobProvenance(BaseModel):
    """Which build a job certifies, as stored on the job and passed into its decision's provenance: the
    candidate (the job's ``model_name`` and ``candidate_version``) and the ``build``."""

    candidate: CandidatePublic
    build: BuildInfo | None = None


class JobCreate(BaseModel):
    """Submit a job: retrain or evaluate (a job spec) or metrics-only (uploaded evaluation logs)."""

    model_config = ConfigDict(extra="forbid")

    mode: EngineMode | Literal["metrics"]
    model_name: ModelName
    policy: PolicyRef
    spec: dict[str, Any] | None = Field(
        None, description='Job spec (clgate.schemas.job.JobSpec); files as {"artifact": "sha256:..."}.'
    )
    logs: list[ArtifactRef] | None = Field(None, description="Evaluation logs (metrics mode), one per seed.")
    baseline: Literal["model", "none"] | Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")] = Field(
        "model", description="'model': the model name's baseline (if any); 'none'; or a job id."
    )
    candidate_version: CandidateVersion | None = Field(
        None, description="The version of the candidate (``model_name``) this job certifies."
    )
    build: BuildInfo | None = Field(
        None, description="The build this job certifies (commit, CI run); `clgate remote` sends the CI's."
    )

    def provenance(self) -> JobProvenance:
        """The candidate (``model_name``, ``candidate_version``) and the build, as stored on the job.

        >>> body = {"mode": "metrics", "model_name": "digits-mlp", "candidate_version": "2.4.0",
        ...         "policy": {"name": "p", "version": "1"}, "logs": ["sha256:" + "a" * 64]}
        >>> JobCreate.model_validate(body).provenance().candidate
        CandidatePublic(name='digits-mlp', version='2.4.0')
        """
        return JobProvenance(
            candidate=CandidatePublic(name=self.model_name, version=self.candidate_version), build=self.build
        )

    @model_validator(mode="after")
    def _mode_inputs(self) -> JobCreate:
        if self.mode == "metrics":
            if not self.logs:
                raise ValueError("logs: metrics mode needs at least one evaluation log artifact")
            if self.spec is not None:
                raise ValueError("spec: metrics mode takes logs, not a spec")
        else:
            if self.spec is None:
                raise ValueError(f"spec: {self.mode} mode needs a job spec")
            if self.logs:
                raise ValueError(f"logs: {self.mode} mode takes a spec, not logs")
        return self

    @property
    def queue(self) -> str:
        return queue_for(self.mode)


class RegateCreate(BaseModel):
    """Gate a finished job's logs again under another policy version (no retraining)."""

    model_config = ConfigDict(extra="forbid")

    policy: PolicyRef
    baseline: Literal["model", "none", "same"] | Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")] = "same"


ProgressStage = Literal["queued", "starting", "running", "done", "stopped"]


class JobProgress(FromRecord):
    """Where a job is, from the moment it is queued: ``queued`` → ``starting`` (claimed, no task yet) →
    ``running`` (``task`` of ``n_tasks``) → ``done`` (``fraction`` 1.0, ``task`` = ``n_tasks``), or
    ``stopped`` (failed or cancelled). ``task`` is 1-based: a 5-task run goes from task 1 to task 5."""

    stage: ProgressStage | None = None
    fraction: float | None = None
    task: int | None = Field(None, description="1-based task being trained or evaluated.")
    n_tasks: int | None = None
    iteration: int | None = None
    message: str | None = None

    def for_state(self, state: str) -> JobProgress:
        """This progress completed from the job's state (a queued job has no progress of its own yet).

        >>> JobProgress().for_state("queued").stage, JobProgress(task=5, n_tasks=5).for_state("succeeded")
        ('queued', JobProgress(stage='done', fraction=1.0, task=5, n_tasks=5, iteration=None, message=None))
        """
        out = self.model_copy()
        if state == "queued":
            out.stage, out.fraction = "queued", out.fraction or 0.0
        elif state == "running" and out.stage is None:
            out.stage = "running" if out.task is not None else "starting"
        elif state == "succeeded":
            out.stage, out.fraction = "done", 1.0
            out.task = out.n_tasks or out.task
        elif state in ("failed", "cancelled"):
            out.stage = "stopped"
        return out


class JobPublic(FromRecord):
    id: str
    mode: Mode
    queue: Queue
    model_name: str
    state: State
    progress: JobProgress
    policy: PolicyRef
    policy_id: str
    baseline_job_id: str | None
    source_job_id: str | None
    cancel_requested: bool
    attempts: int
    error: str | None
    submitted_by: str | None
    worker: str | None = Field(None, description="host:pid of the process that ran (or runs) the job.")
    created_at: UtcDatetime
    started_at: UtcDatetime | None
    finished_at: UtcDatetime | None
    duration_s: float | None
    verdict: Verdict | None = None
    waived: bool = Field(False, description="A waiver of the FAIL is in force (not expired).")
    project: str = "default"
    provenance: JobProvenance | None = Field(
        None,
        description="The candidate and build the job certifies (null on jobs recorded before it was kept).",
    )

    @field_validator("progress", mode="before")
    @classmethod
    def _no_progress_yet(cls, value: Any) -> Any:
        return {} if value is None else value

    @model_validator(mode="after")
    def _progress_from_state(self) -> JobPublic:
        self.progress = self.progress.for_state(self.state)
        return self


class JobsPublic(BaseModel):
    data: list[JobPublic]
    count: int = Field(description="Jobs matching the filters (all pages).")


class ResultFilePublic(FromRecord):
    name: str
    sha256: str
    size: int
    url: str


class ResultsPublic(BaseModel):
    job_id: str
    files: list[ResultFilePublic]


class WaiverCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    justification: str = Field(
        min_length=20, max_length=10_000, description="Why shipping despite the FAIL is acceptable."
    )
    expires_at: dt.datetime | None = None

    @field_validator("justification")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if len(value.strip()) < 20:
            raise ValueError("a justification needs at least 20 non-blank characters")
        return value.strip()


class WaiverPublic(FromRecord):
    id: str
    job_id: str
    decision_id: str
    justification: str
    approver: str
    created_at: UtcDatetime
    expires_at: UtcDatetime | None
    record_hash: str | None = Field(
        None, description="The waiver's link in its hash chain (`clgate audit verify`)."
    )


class DecisionPublic(FromRecord):
    id: str
    job_id: str
    policy_id: str
    model_name: str
    verdict: Verdict
    headline: dict[str, Any]
    document: dict[str, Any] = Field(description="The gate decision as the gate wrote it (decision.json).")
    created_at: UtcDatetime
    record_hash: str | None = Field(
        None, description="The decision's link in its hash chain (`clgate audit verify`)."
    )
    waivers: list[WaiverPublic] = Field(default_factory=list)


class PolicyVersionPublic(FromRecord):
    id: str
    name: str
    version: str
    sha256: str
    created_at: UtcDatetime
    created_by: str | None
    document: dict[str, Any]


class PoliciesPublic(BaseModel):
    data: list[PolicyVersionPublic]
    count: int


class BaselineSet(BaseModel):
    model_config = ConfigDict(extra="forbid")

    job_id: str = Field(pattern=r"^[0-9a-f]{32}$")


class BaselinePublic(FromRecord):
    model_name: str
    job_id: str
    set_by: str
    set_at: UtcDatetime


class BaselinesPublic(BaseModel):
    data: list[BaselinePublic]
    count: int


class AuditEventPublic(FromRecord):
    id: int | None = Field(
        description="The event's number in the deployment's trail; null for a key scoped to one project "
        "(numbers count every project's events)."
    )
    at: UtcDatetime
    actor: str
    action: str
    subject_type: str
    subject_id: str
    details: dict[str, Any]
    project: str | None = None
    seq: int | None = Field(
        None,
        description="Position in the audit hash chain (`clgate audit verify`); null for a key scoped to one "
        "project (positions count every project's events).",
    )
    record_hash: str | None = Field(
        None, description="SHA-256 of the event's content and its predecessor's hash."
    )


class AuditEventsPublic(BaseModel):
    data: list[AuditEventPublic]
    count: int


class SignedHead(BaseModel):
    """A family's signed history head: keep it outside the database (``clgate audit verify --head``)."""

    family: str
    length: int
    head_hash: str
    at: str
    key_id: str
    signature: str


class HistoryHeadsPublic(BaseModel):
    public_key: str = Field(description="The signing key's public key (ed25519:<base64>).")
    key_id: str
    heads: list[SignedHead]


class KeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    role: Role
    project: Project = "default"


class KeyCreated(FromRecord):
    id: str
    name: str
    role: Role
    project: str
    key: str = Field(description="The secret key, shown once; only its hash is stored.")


class KeyPublic(FromRecord):
    id: str
    name: str
    role: Role
    project: str
    created_at: UtcDatetime
    revoked_at: UtcDatetime | None


class KeysPublic(BaseModel):
    data: list[KeyPublic]
    count: int


class WhoAmI(FromRecord):
    id: str
    name: str
    role: Role
    project: str


class Health(BaseModel):
    status: Literal["ok", "unavailable"]
    checks: dict[str, str] = Field(default_factory=dict)


WebhookEvent = Literal["decision", "waiver"]
WEBHOOK_EVENTS: tuple[WebhookEvent, ...] = get_args(WebhookEvent)


class WebhookCreate(BaseModel):
    """Register a URL that receives the project's decisions (and waivers), signed (see docs)."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(
        max_length=2000,
        pattern=r"^https?://[^\s/]+(/\S*)?$",
        description="http(s) URL the events are POSTed to.",
    )
    events: list[WebhookEvent] = Field(default_factory=lambda: list(WEBHOOK_EVENTS), min_length=1)
    payload_format: Literal["clgate", "slack", "mlflow"] = Field(
        "clgate",
        description="clgate: the event JSON; slack: {'text': …} for Slack/Teams incoming webhooks; "
        "mlflow: each decision logged to the MLflow tracking server at url (experiment clgate-<project>).",
    )


class WebhookPublic(BaseModel):
    id: str
    project: str
    url: str
    events: list[str]
    payload_format: str
    created_by: str
    created_at: UtcDatetime
    disabled_at: UtcDatetime | None = None


class WebhookCreated(WebhookPublic):
    secret: str = Field(description="The HMAC-SHA256 key of the signatures, shown once.")


class WebhooksPublic(BaseModel):
    data: list[WebhookPublic]
    count: int


class WebhookDeliveryPublic(BaseModel):
    id: str
    webhook_id: str
    event: str
    subject_id: str
    status: Literal["pending", "delivered", "failed"]
    attempts: int
    last_status_code: int | None
    last_error: str | None
    next_attempt_at: UtcDatetime
    created_at: UtcDatetime
    delivered_at: UtcDatetime | None
    body: str = Field(description="The event JSON as signed and sent (clgate format).")


class WebhookDeliveriesPublic(BaseModel):
    data: list[WebhookDeliveryPublic]
    count: int
