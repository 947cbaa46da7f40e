"""Numbers as text, the same way in every report, table and rule message.

:func:`fmt` is for people (reports, the CLI's tables): fixed digits, integers as integers, ``—`` for a
missing value. :func:`fmt_short` is for the one-line rule messages of a decision: four significant
digits and ``null`` for a missing value, as in the decision's JSON. :func:`printable` is for names and
messages from a user's files (class names, policy names, rule messages) on their way to a report, a
terminal or an XML file: control characters made visible and inert.
"""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = ["fmt", "fmt_short", "printable"]

# C0 controls but tab and newline, DEL and C1 (ESC starts ANSI sequences), lone surrogates, the bidi
# overrides and isolates (text that reads one way and runs another), and the XML non-characters.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\u202a-\u202e\u2066-\u2069\ufffe\uffff]")


def _visible(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: Any) -> str:
    r"""``text`` with every control character (ANSI escapes included), lone surrogate, bidi override and
    XML non-character written as a visible ``\xNN`` / ``\uNNNN`` escape; tab and newline stay. The
    result is safe on a terminal and valid in XML 1.0.

    >>> print(printable("cat\x1b[31m red"), printable("ok"), printable("a\u202eb"))
    cat\x1b[31m red ok a\u202eb
    """
    return _UNPRINTABLE.sub(_visible, str(text))


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
