"""YAML request bodies: a policy or a job submission sent as ``application/yaml`` (or ``text/yaml``,
``application/x-yaml``) is read as YAML and handed on as JSON, so every route validates it as usual.

Bounded like JSON: a body over ``max_bytes`` is refused (413), aliases and anchors are refused (a
"billion laughs" document expands a few bytes into gigabytes), and a document that does not parse is a
422 naming the line and the reason. The JSON that results passes through :class:`RequestGuard` next
(depth, non-finite numbers, NUL characters). Dates and other YAML-only types become strings.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from clgate.service.limits import _refuse as refuse
from clgate.service.limits import read_body, replaying

YAML_TYPES = frozenset({b"application/yaml", b"application/x-yaml", b"text/yaml", b"text/x-yaml"})


def yaml_to_json(body: bytes) -> bytes:
    """The YAML document ``body`` as JSON bytes; raises ``ValueError`` saying why it is refused.

    >>> yaml_to_json(b"name: p\\nversion: 1\\nrules:\\n  - {metric: acc, floor: 0.5}\\n")
    b'{"name": "p", "version": 1, "rules": [{"metric": "acc", "floor": 0.5}]}'
    >>> yaml_to_json(b"a: &x [1]\\nb: *x\\n")
    Traceback (most recent call last):
    ...
    ValueError: YAML body: anchors and aliases are not accepted (line 1)
    """
    import yaml

    try:
        text = body.decode("utf-8")
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            anchored = isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None
            if anchored:
                line = event.start_mark.line + 1
                raise ValueError(f"YAML body: anchors and aliases are not accepted (line {line})")
        document: Any = yaml.safe_load(text)
    except UnicodeDecodeError:
        raise ValueError("YAML body: not UTF-8 text") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ValueError(f"YAML body: not valid YAML{where}: {problem}") from None
    return json.dumps(document, default=str).encode()


class YamlBody:
    """Pure ASGI middleware: a YAML request body becomes the equivalent JSON body (see the module doc)."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = scope.get("headers", []) if scope["type"] == "http" else []
        media = next((v for k, v in headers if k.lower() == b"content-type"), b"")
        if media.split(b";")[0].strip().lower() not in YAML_TYPES:
            await self.app(scope, receive, send)
            return
        raw = await read_body(receive, send, max_bytes=self.max_bytes, what="YAML")
        if raw is None:
            return
        try:
            body = yaml_to_json(raw)
        except ValueError as exc:
            await refuse(send, 422, str(exc))
            return
        rest = [(k, v) for k, v in headers if k.lower() not in (b"content-type", b"content-length")]
        json_headers = [*rest, (b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        await self.app({**scope, "headers": json_headers}, replaying(body, receive), send)
