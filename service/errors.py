"""JSON errors with a reason: ``{"error": "<code>", "reason": "<sentence>", "problems": [...]}``
(:class:`clgate.schemas.api.ErrorBody`).

A store query's refusal (:class:`clgate.store.errors.RecordError`) is answered with its status; an
:class:`ApiError` is for what only HTTP knows (a missing key, a body over its limit).
"""

from __future__ import annotations

import logging

import sqlalchemy.exc
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from clgate.schemas.api import ERROR_CODES, ErrorBody
from clgate.schemas.errors import problems_of
from clgate.store.db import describe_db_error
from clgate.store.errors import RecordError

log = logging.getLogger("clgate.api")

_WHY = {
    400: "Malformed request",
    401: "No API key, or an invalid or revoked one",
    403: "The key's role may not do this",
    404: "No such record",
    409: "Conflicts with the record's state",
    413: "Body larger than its limit (the reason names the setting)",
    422: "Invalid input (the problems name each field and the reason; limits are named)",
    503: "Database locked, read-only or unreachable, or the job queue unavailable (retry later)",
}
# Documented on every route of the API (the OpenAPI lists each status a route can answer, with this body).
ERROR_RESPONSES: dict[int | str, dict] = {
    code: {"model": ErrorBody, "description": why} for code, why in _WHY.items()
}


class ApiError(HTTPException):
    def __init__(self, status: int, reason: str, *, problems: list[str] | None = None, headers=None) -> None:
        super().__init__(status_code=status, detail=reason, headers=headers)
        self.problems = problems or []


def error_body(status: int, reason: str, problems: list[str] | None = None) -> dict:
    """The JSON of an error answer with ``status`` (the one :class:`ErrorBody` of every error)."""
    return ErrorBody(
        error=ERROR_CODES.get(status, "error"), reason=reason, problems=problems or []
    ).model_dump()


def install(app: FastAPI) -> None:
    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        reason = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        return JSONResponse(
            error_body(exc.status_code, reason, getattr(exc, "problems", None)),
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    @app.exception_handler(RecordError)
    async def _record(request: Request, exc: RecordError) -> JSONResponse:
        return JSONResponse(error_body(exc.status, exc.reason, exc.problems), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = problems_of(exc.errors())
        reason = problems[0] if len(problems) == 1 else f"{len(problems)} problems in the request"
        return JSONResponse(error_body(422, reason, problems), status_code=422)

    @app.exception_handler(sqlalchemy.exc.OperationalError)
    @app.exception_handler(sqlalchemy.exc.InterfaceError)
    @app.exception_handler(sqlalchemy.exc.TimeoutError)
    async def _database(request: Request, exc: Exception) -> JSONResponse:
        """A locked, read-only, unreachable or exhausted database: 503 with the reason, never a 500."""
        reason = describe_db_error(exc)
        log.warning("database fault on %s %s: %s", request.method, request.url.path, reason)
        return JSONResponse(error_body(503, reason), status_code=503, headers={"Retry-After": "5"})

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error on %s %s", request.method, request.url.path)
        return JSONResponse(error_body(500, f"internal error ({type(exc).__name__})"), status_code=500)
