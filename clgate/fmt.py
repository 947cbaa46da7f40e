"""Numbers as text, the same way in every report, table and rule message.

:func:`fmt` is for people (reports, the CLI's tables): fixed digits, integers as integers, ``—`` for a
missing value. :func:`fmt_short` is for the one-line rule messages of a decision: four significant
digits and ``null`` for a missing value, as in the decision's JSON.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["fmt", "fmt_short"]


def fmt(x: Any, digits: int = 4) -> str:
    """Numbers for people: fixed digits, integers as integers, ``—`` for missing.

    >>> fmt(0.5), fmt(None), fmt(3.0), fmt(float("-inf")), fmt(True), fmt(0.25, 2)
    ('0.5000', '—', '3', '-inf', 'true', '0.25')
    """
    if x is None:
        return "—"
    if isinstance(x, bool):
        return str(x).lower()
    if isinstance(x, int) or (isinstance(x, float) and math.isfinite(x) and x == int(x) and abs(x) >= 1):
        return str(int(x))
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def fmt_short(x: float | None) -> str:
    """A value in a rule message: four significant digits, ``null`` when missing.

    >>> fmt_short(0.123456), fmt_short(None), fmt_short(2.0)
    ('0.1235', 'null', '2')
    """
    return "null" if x is None else f"{x:.4g}"
