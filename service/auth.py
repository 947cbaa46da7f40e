"""API keys as the API's users know them: ``clgate.service.auth.new_key`` makes a key for
``CLGATE_BOOTSTRAP_ADMIN_KEY`` (docs/service.md).

The key records — making, verifying, revoking — live in :mod:`clgate.store.keys`; the routes' key
dependencies in :mod:`clgate.service.deps`.
"""

from __future__ import annotations

from clgate.store.keys import create_key, has_role, new_key, split_key, verify

__all__ = ["create_key", "has_role", "new_key", "split_key", "verify"]
