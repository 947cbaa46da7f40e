"""What a store query refuses, and why: a missing record, a record of another project, a state conflict,
invalid input.

The API answers each with its status (404, 403, 409, 422) and the reason; the CLI prints the reason.
A record of another project is refused exactly like a missing one (:class:`NotFound`), so that a key
cannot probe other projects.
"""

from __future__ import annotations

from typing import ClassVar


class RecordError(Exception):
    """A refused read or write; ``reason`` is one sentence, ``problems`` the individual ``field: reason``
    lines (when there are several)."""

    status: ClassVar[int] = 400
    """The HTTP status the API answers with."""

    def __init__(self, reason: str, *, problems: list[str] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.problems = problems or []


class NotFound(RecordError):
    """No such record, or one this key may not see."""

    status = 404


class Forbidden(RecordError):
    """The key sees the record but may not act on it."""

    status = 403


class Conflict(RecordError):
    """The record's state does not allow it."""

    status = 409


class Invalid(RecordError):
    """The request names something that does not exist or cannot be used."""

    status = 422
