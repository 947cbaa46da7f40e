"""One error base for bad input and one ``field: reason`` formatter for pydantic's validation errors.

Every error that is the user's input, not a bug (an evaluation log, a job specification, a policy,
the engine's data, model and strategy parameters), is an :class:`InputError`: a :class:`ValueError`
whose ``problems`` list one ``field: reason`` line each. The CLI prints them and exits 2; the API
answers 4xx with them. :func:`problems_of` turns a pydantic :class:`~pydantic.ValidationError` into
those lines, the same way everywhere.

>>> from pydantic import BaseModel
>>> class Point(BaseModel):
...     task: int
...     correct: list[int]
>>> try:
...     Point.model_validate({"task": "one", "correct": [1, "x"]})
... except ValidationError as exc:
...     err = InputError(problems_of(exc), source="log.json")
>>> for line in err.problems:
...     print(line)
task: Input should be a valid integer, unable to parse string as an integer
correct[1]: Input should be a valid integer, unable to parse string as an integer
>>> print(InputError(["points[3].task: must be ≥ 1"], what="evaluation log"))
invalid evaluation log
  points[3].task: must be ≥ 1
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ValidationError

__all__ = ["InputError", "loc_to_path", "problems_of", "validate"]

M = TypeVar("M", bound=BaseModel)


class InputError(ValueError):
    """Input that cannot be used; ``problems`` lists one ``field: reason`` line each.

    ``str(error)`` is ``"<source>: invalid <what>"`` followed by the problems, one per indented line;
    subclasses set :attr:`what`. With ``what`` empty (the engine's errors) the message is the
    problems alone, one per line. ``source`` names where the input came from (a file, a request).
    """

    what: ClassVar[str] = ""

    def __init__(
        self, problems: str | Sequence[str], source: str | None = None, *, what: str | None = None
    ) -> None:
        message = problems if isinstance(problems, str) else None
        lines = problems.splitlines() if isinstance(problems, str) else [str(p) for p in problems]
        self.problems: list[str] = lines or [f"invalid {what or self.what or 'input'}"]
        self.source = source
        what = self.what if what is None else what
        if what:
            head = f"{source}: invalid {what}" if source else f"invalid {what}"
            message = head + "\n" + "\n".join(f"  {p}" for p in self.problems)
        elif message is None:
            message = "\n".join(self.problems)
            if source:
                message = f"{source}: {message}"
        super().__init__(message)


def loc_to_path(loc: Sequence[int | str]) -> str:
    """A pydantic error location as a path: ``("points", 12, "correct", 3)`` → ``points[12].correct[3]``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def problems_of(
    exc: ValidationError | Sequence[Mapping[str, Any]],
    *,
    prefix: str = "",
    tags: Mapping[str, Collection[str]] | None = None,
    messages: Mapping[str, str] | None = None,
) -> list[str]:
    """One ``field: reason`` line per pydantic error, the one formatter of clgate.

    The field is the error's location as a path (:func:`loc_to_path`) under ``prefix``; the reason is
    pydantic's message without its ``Value error, `` prefix. An error without a field (a model-level
    check) gives its message, one line per line: those checks name their fields themselves.
    ``tags`` maps the field of a tagged union to its discriminator tags, which pydantic inserts in the
    location after the field (or after its list index: ``rules[3].metric.floor``); they are left out
    (``rules[3].floor``).
    ``messages`` replaces the reason of an error type; its text may use ``{field}`` (the location
    below ``prefix``) and ``{input}``. ``exc`` may also be the list of a validation error's errors
    (as FastAPI's ``RequestValidationError.errors()`` gives them).
    """
    errors = exc.errors(include_url=False) if isinstance(exc, ValidationError) else exc
    lines: list[str] = []
    for err in errors:
        loc = _without_tags(tuple(err.get("loc", ())), tags)
        field = loc_to_path(loc)
        path = _join(prefix, field)
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        if messages and err.get("type") in messages:
            msg = messages[str(err["type"])].format(field=field, input=err.get("input"))
        if path:
            lines.append(f"{path}: {msg}")
        else:
            lines.extend(msg.splitlines() or [msg])
    return lines


def _without_tags(loc: tuple[Any, ...], tags: Mapping[str, Collection[str]] | None) -> tuple[Any, ...]:
    """``loc`` without union tags; a part right after a dropped tag is a field, even if named like one."""
    if not tags:
        return loc
    kept: list[Any] = []
    dropped = False
    for part in loc:
        owner = next((p for p in reversed(kept) if not isinstance(p, int)), None)  # the field, past indices
        if not dropped and isinstance(part, str) and isinstance(owner, str) and part in tags.get(owner, ()):
            dropped = True
            continue
        kept.append(part)
        dropped = False
    return tuple(kept)


def _join(prefix: str, path: str) -> str:
    if not prefix or not path:
        return prefix or path
    return prefix + path if path.startswith("[") else f"{prefix}.{path}"


def validate(
    model: type[M],
    data: Any,
    error: type[InputError],
    *,
    source: str | None = None,
    tags: Mapping[str, Collection[str]] | None = None,
) -> M:
    """``model.model_validate(data)``; a pydantic error raises ``error`` with :func:`problems_of`'s lines."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise error(problems_of(exc, tags=tags), source) from None
