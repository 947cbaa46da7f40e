"""The clgate API: ``create_app()`` builds the FastAPI application.

Only ``/healthz`` and ``/readyz`` answer without a key. The OpenAPI document at ``/openapi.json`` needs a
viewer key, and the interactive pages ``/docs`` and ``/redoc`` are served only with
``CLGATE_PUBLIC_DOCS=true`` (which also opens ``/openapi.json``).

``uvicorn --factory clgate.service.app:create_app`` or ``clgate serve``. Settings are read and validated here
(start-up fails with the variable's name when one is wrong); with no ``CLGATE_BROKER_URL`` the jobs
run in an embedded background executor, otherwise they go to Celery workers through Redis.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from clgate._version import __version__
from clgate.integrations.webhooks import start_webhooks
from clgate.schemas.api import Health
from clgate.service import errors
from clgate.service.deps import Viewer, scope
from clgate.service.dispatch import make_dispatcher
from clgate.service.limits import AdmissionLimit, RequestGuard
from clgate.service.metrics import ProjectView, api_registry
from clgate.service.routers import admin, artifacts, jobs, policies, webhooks
from clgate.service.yaml_body import YamlBody
from clgate.store import open_store
from clgate.store.db import check_writable, current_revision, head_revision, pool_status, wait_for_schema
from clgate.store.keys import bootstrap_admin
from clgate.store.settings import Settings, load_settings
from clgate.workers.sandbox import warn_if_unconfined

log = logging.getLogger("clgate.api")


def _lifespan(settings: Settings):
    """Start-up and shut-down of an app: the store, the bootstrap key, the dispatcher, the registry."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        import anyio.to_thread

        # one worker thread per admitted request, plus the health probes and background calls
        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.db_pool_size
        store = open_store(settings, migrate=settings.auto_migrate)
        engine, sessions = store.engine, store.sessions
        swept = store.artifacts.sweep_orphans(older_than_s=settings.orphan_upload_age_s)
        if swept:
            log.warning("removed %d orphan upload files left by an interrupted upload", len(swept))
        wait_for_schema(engine, timeout_s=30)
        if settings.bootstrap_admin_key:
            bootstrap_admin(sessions, settings.bootstrap_admin_key)
        app.state.engine = engine
        app.state.sessions = sessions
        app.state.store = store.artifacts
        app.state.dispatcher = make_dispatcher(settings, sessions)
        app.state.dispatcher.start()
        app.state.webhooks = start_webhooks(store, settings)
        # the deployment's series once per deployment: here in embedded mode (one API process),
        # from `clgate exporter` in Celery mode (any number of API replicas; see clgate.service.metrics)
        app.state.registry = api_registry(
            sessions,
            store_metrics=settings.embedded,
            process_metrics=settings.api_processes == 1,
            queue_lengths=app.state.dispatcher.queue_lengths,
            worst_classes=settings.worst_classes,
            worker_stale_s=settings.worker_stale_s,
        )
        # embedded jobs run here: say now (and in /readyz) whether submitted models can be confined
        app.state.sandbox = warn_if_unconfined(settings) if settings.embedded else None
        log.info(
            "clgate API ready (%s mode, database %s)",
            app.state.dispatcher.kind,
            engine.url.render_as_string(),
        )
        try:
            yield
        finally:
            app.state.webhooks.close()
            app.state.dispatcher.close()
            engine.dispose()

    return lifespan


def _schema_problem(engine) -> str | None:
    """Why the schema is not the one this code expects (read from ``alembic_version``, never written)."""
    try:
        found, head = current_revision(engine), head_revision()
    except Exception as exc:  # unreachable mid-check: the write check names it next time
        return f"the schema version cannot be read ({type(exc).__name__})"
    return None if found == head else f"schema at revision {found}, this code needs {head}"


def _key_routes(app: FastAPI, public: bool) -> None:
    """The routes outside ``/v1`` that need a viewer key: the OpenAPI document (unless public), metrics."""
    if not public:

        @app.get(
            "/openapi.json", include_in_schema=False, summary="The OpenAPI document (needs a viewer key)"
        )
        def openapi_document(_: Viewer) -> JSONResponse:
            return JSONResponse(app.openapi())

    @app.get(
        "/metrics",
        tags=["health"],
        response_class=Response,
        summary="Prometheus metrics (needs a viewer key; a key sees its own project's series)",
        responses={k: v for k, v in errors.ERROR_RESPONSES.items() if k in (401, 403, 503)},
    )
    def metrics(request: Request, key: Viewer) -> Response:
        view = ProjectView(request.app.state.registry, scope(key).key_project)
        return Response(generate_latest(view), media_type=CONTENT_TYPE_LATEST)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or load_settings()
    public = settings.public_docs
    app = FastAPI(
        title="clgate",
        version=__version__,
        summary="Validation service for class-incremental classifiers: jobs, gate decisions, audit trail.",
        lifespan=_lifespan(settings),
        openapi_url="/openapi.json" if public else None,
        docs_url="/docs" if public else None,
        redoc_url="/redoc" if public else None,
    )
    app.state.settings = settings
    errors.install(app)
    app.add_middleware(AdmissionLimit, limit=settings.api_concurrency, write_limit=settings.write_concurrency)
    app.add_middleware(
        RequestGuard, max_json_bytes=settings.max_json_bytes, max_json_depth=settings.max_json_depth
    )
    app.add_middleware(YamlBody, max_bytes=settings.max_json_bytes)  # outside RequestGuard: YAML → JSON first

    v1 = APIRouter(prefix="/v1")
    for router in (
        artifacts.router,
        jobs.router,
        policies.router,
        webhooks.router,
        admin.baselines,
        admin.audit_router,
        admin.keys,
    ):
        v1.include_router(router)
    app.include_router(v1, responses=errors.ERROR_RESPONSES)

    @app.get("/healthz", response_model=Health, tags=["health"], summary="Liveness: the process answers")
    def healthz() -> Health:
        return Health(status="ok")

    @app.get(
        "/readyz",
        response_model=Health,
        tags=["health"],
        responses={503: {"model": Health, "description": "Not ready: the checks say why"}},
        summary=(
            "Readiness: database writable at the expected schema, connections free, broker reachable; "
            "how job models are confined"
        ),
    )
    def readyz(request: Request):
        checks: dict[str, str] = {}
        engine = request.app.state.engine
        used, capacity = pool_status(engine)
        if capacity and used >= capacity:
            db_ok, checks["database"] = False, f"pool exhausted: {used} of {capacity} connections in use"
        else:
            problem = check_writable(engine, timeout_s=2.0) or _schema_problem(engine)
            db_ok, checks["database"] = problem is None, problem or "ok"
        checks["connections"] = f"{used} of {capacity or 'unbounded'} in use"
        broker_ok, checks["broker"] = request.app.state.dispatcher.ready()
        ok = db_ok and broker_ok
        sandbox = request.app.state.sandbox
        if sandbox is None:
            checks["sandbox"] = "in the workers (each logs its own at start)"
            if settings.allow_unconfined:  # the laptop-only escape hatch, set where it has no business
                checks["sandbox"] += "; CLGATE_ALLOW_UNCONFINED=true is set here (laptop-only escape hatch)"
        elif sandbox.mode is None:
            checks["sandbox"] = f"unavailable: {sandbox.detail}; retrain and evaluate jobs are refused"
            # an operator who asked for bwrap explicitly gets an unready service rather than refused jobs
            ok = ok and settings.sandbox != "bwrap"
        else:
            checks["sandbox"] = (
                "bwrap" if sandbox.confined else f"UNCONFINED: {sandbox.detail} (laptop-only escape hatch)"
            )
        body = Health(status="ok" if ok else "unavailable", checks=checks)
        return body if ok else JSONResponse(body.model_dump(), status_code=503)

    _key_routes(app, public)
    return app
