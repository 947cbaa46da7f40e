"""Admission control: at most ``CLGATE_API_CONCURRENCY`` requests are handled at once.

Why: each request handled by a sync route holds a worker thread and (through its session) at most one
database connection; the thread pool and the connection pool are sized from the same number
(:attr:`clgate.store.settings.Settings.db_pool_size`), so an admitted request never waits for a
connection while another request holds one and waits for a thread (the deadlock of an unbounded
admission: 40 threads waiting for connections held by requests waiting for threads). Requests beyond the
limit wait here, in the event loop, holding neither. Health probes are never held back.
"""

from __future__ import annotations

import asyncio
import math

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from clgate.service.errors import error_body

EXEMPT = frozenset({"/healthz", "/readyz"})
# The largest ``skip`` of a listing (a 64-bit OFFSET overflows the database's integer).
MAX_SKIP = 2**31 - 1


READING = frozenset({"GET", "HEAD", "OPTIONS"})
UPLOADS = "/v1/artifacts"  # streamed bodies: their database write is one short insert at the end


class AdmissionLimit:
    """Pure ASGI middleware: a semaphore around every HTTP request except the health probes, and a second,
    smaller one that writing requests take first (``write_limit``).

    Why the second: SQLite takes one writer at a time, and the others wait on its lock by sleeping and
    retrying, unfairly (a newcomer often wins), so under a burst of submissions some wait past the busy
    timeout and fail (503 "database is locked"). Writers queued here wait in arrival order instead
    (asyncio's semaphore is fair), holding neither a thread nor a connection, and reads pass them by.
    Only a request whose body is already read takes a write slot (see :func:`_writes`), so a client that
    sends its body slowly never holds one.
    """

    def __init__(self, app: ASGIApp, *, limit: int, write_limit: int | None = None) -> None:
        self.app = app
        self.limit = limit
        self.write_limit = write_limit or limit
        self.active = 0
        self.waiting = 0
        self._semaphore: asyncio.Semaphore | None = None
        self._writers: asyncio.Semaphore | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in EXEMPT:
            await self.app(scope, receive, send)
            return
        if self._semaphore is None or self._writers is None:
            self._semaphore = asyncio.Semaphore(self.limit)
            self._writers = asyncio.Semaphore(self.write_limit)
        writes = _writes(scope)
        self.waiting += 1
        try:
            if writes:
                await self._writers.acquire()
            try:
                await self._semaphore.acquire()
            except BaseException:
                if writes:
                    self._writers.release()
                raise
        finally:
            self.waiting -= 1
        self.active += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.active -= 1
            self._semaphore.release()
            if writes:
                self._writers.release()


def _writes(scope: Scope) -> bool:
    """Whether a request takes a write slot: a writing method on a route other than an upload, with a
    JSON body (read whole by :class:`RequestGuard`, the middleware outside this one) or none at all."""
    if scope.get("method") in READING or scope.get("path", "").startswith(UPLOADS):
        return False
    headers = dict(scope.get("headers", []))
    json_body = headers.get(b"content-type", b"").split(b";")[0].strip().endswith(b"json")
    no_body = headers.get(b"content-length", b"0") == b"0" and b"transfer-encoding" not in headers
    return json_body or no_body


class RequestGuard:
    """Pure ASGI middleware: bounds and hygiene of every JSON request, before any route sees it.

    * a JSON body larger than ``max_json_bytes`` → 413 (checked on ``Content-Length`` and while reading);
    * nesting deeper than ``max_json_depth`` → 422 (a 900-deep spec once reached a RecursionError);
    * NaN / Infinity → 422 (JSON has no such numbers; Python's parser accepts them);
    * a NUL character in a JSON string, the path or the query → 422 (PostgreSQL refuses it in text).

    Artifact uploads (not JSON) keep their own limit, ``CLGATE_MAX_UPLOAD_BYTES``.
    """

    def __init__(self, app: ASGIApp, *, max_json_bytes: int, max_json_depth: int) -> None:
        self.app, self.max_bytes, self.max_depth = app, max_json_bytes, max_json_depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if "\x00" in scope.get("path", "") or b"%00" in scope.get("query_string", b""):
            await _refuse(send, 422, "a NUL character is not allowed in the path or the query")
            return
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        if not headers.get(b"content-type", b"").split(b";")[0].strip().endswith(b"json"):
            await self.app(scope, receive, send)
            return
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await _refuse(
                send, 413, f"the JSON body is larger than {self.max_bytes} bytes (CLGATE_MAX_JSON_BYTES)"
            )
            return
        body = await read_body(receive, send, max_bytes=self.max_bytes, what="JSON")
        if body is None:
            return
        problem = check_json(body, max_depth=self.max_depth)
        if problem is not None:
            await _refuse(send, 422, problem)
            return
        await self.app(scope, replaying(body, receive), send)


async def read_body(receive: Receive, send: Send, *, max_bytes: int, what: str) -> bytes | None:
    """The whole request body, or ``None`` when the client left or the body passed ``max_bytes``
    (then refused: 413 naming the ``what`` body and the setting)."""
    chunks, size, more = [], 0, True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > max_bytes:
            await _refuse(
                send, 413, f"the {what} body is larger than {max_bytes} bytes (CLGATE_MAX_JSON_BYTES)"
            )
            return None
        chunks.append(chunk)
        more = message.get("more_body", False)
    return b"".join(chunks)


def replaying(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the application ``body`` (already read) once, then the client's messages."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def check_json(body: bytes, *, max_depth: int) -> str | None:
    """Why ``body`` is refused (too deep, non-finite number, NUL in a string), or ``None``.

    Malformed JSON passes: the route's own validation answers it with its usual 422.

    >>> check_json(b'{"a": [1, 2]}', max_depth=2) is None
    True
    >>> check_json(b'[[[1]]]', max_depth=2)
    'the JSON body is nested deeper than 2 levels (CLGATE_MAX_JSON_DEPTH)'
    >>> check_json(b'{"lr": Infinity}', max_depth=8)
    'Infinity is not a JSON number: numbers must be finite'
    """
    import json

    depth = _depth(body)
    if depth > max_depth:
        return f"the JSON body is nested deeper than {max_depth} levels (CLGATE_MAX_JSON_DEPTH)"

    def refuse(constant: str):
        raise ValueError(f"{constant} is not a JSON number: numbers must be finite")

    try:
        document = json.loads(body, parse_constant=refuse)
    except ValueError as exc:
        message = str(exc)
        return message if "must be finite" in message else None
    except RecursionError:
        return f"the JSON body is nested deeper than {max_depth} levels (CLGATE_MAX_JSON_DEPTH)"
    stack = [document]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return "a NUL character is not allowed in a string"
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, float) and not math.isfinite(item):
            return "numbers must be finite"
    return None


def _depth(body: bytes) -> int:
    """The deepest nesting of arrays and objects in ``body`` (brackets inside strings not counted)."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in body:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


async def _refuse(send: Send, status: int, reason: str) -> None:
    import json

    payload = json.dumps(error_body(status, reason, [reason])).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
