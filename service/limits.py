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

from starlette.types import ASGIApp, Receive, Scope, Send

EXEMPT = frozenset({"/healthz", "/readyz"})


class AdmissionLimit:
    """Pure ASGI middleware: a semaphore around every HTTP request except the health probes."""

    def __init__(self, app: ASGIApp, *, limit: int) -> None:
        self.app = app
        self.limit = limit
        self.active = 0
        self.waiting = 0
        self._semaphore: asyncio.Semaphore | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in EXEMPT:
            await self.app(scope, receive, send)
            return
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self.limit)
        self.waiting += 1
        try:
            await self._semaphore.acquire()
        finally:
            self.waiting -= 1
        self.active += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.active -= 1
            self._semaphore.release()
