"""JSON errors with a reason: ``{"error": "<code>", "reason": "<sentence>", "problems": [...]}``."""

from __future__ import annotations

import logging

import sqlalchemy.exc
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from clgate.schemas.errors import problems_of
from clgate.store.db import describe_db_error

log = logging.getLogger("clgate.api")

CODES = {
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


class ErrorBody(BaseModel):
    """Every error answer: a stable code, a sentence saying why, and the individual problems (field:
    reason)."""

    error: str = Field(description="Stable code: " + ", ".join(sorted(set(CODES.values()))))
    reason: str
    problems: list[str] = Field(default_factory=list)


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


def _body(status: int, reason: str, problems: list[str] | None = None) -> dict:
    return {"error": CODES.get(status, "error"), "reason": reason, "problems": problems or []}


def install(app: FastAPI) -> None:
    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        reason = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        return JSONResponse(
            _body(exc.status_code, reason, getattr(exc, "problems", None)),
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = problems_of(exc.errors())
        reason = problems[0] if len(problems) == 1 else f"{len(problems)} problems in the request"
        return JSONResponse(_body(422, reason, problems), status_code=422)

    @app.exception_handler(sqlalchemy.exc.OperationalError)
    @app.exception_handler(sqlalchemy.exc.InterfaceError)
    @app.exception_handler(sqlalchemy.exc.TimeoutError)
    async def _database(request: Request, exc: Exception) -> JSONResponse:
        """A locked, read-only, unreachable or exhausted database: 503 with the reason, never a 500."""
        reason = describe_db_error(exc)
        log.warning("database fault on %s %s: %s", request.method, request.url.path, reason)
        return JSONResponse(_body(503, reason), status_code=503, headers={"Retry-After": "5"})

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error on %s %s", request.method, request.url.path)
        return JSONResponse(_body(500, f"internal error ({type(exc).__name__})"), status_code=500)
