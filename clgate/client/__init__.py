"""The clgate service's Python client: ``Client`` (httpx, answers typed with :mod:`clgate.schemas.api`).

``Client()`` reads ``CLGATE_URL`` and ``CLGATE_API_KEY``; ``clgate remote …`` is the same client on the
command line. Errors: :class:`ApiError` (the service answered 4xx/5xx, with its reason and problems),
:class:`Unreachable` (no answer), :class:`WaitTimeout` (a job not finished in time).
"""

from clgate.client.core import ApiError, Client, ClientError, Unreachable, WaitTimeout
from clgate.client.specs import prepare_spec

__all__ = ["ApiError", "Client", "ClientError", "Unreachable", "WaitTimeout", "prepare_spec"]
