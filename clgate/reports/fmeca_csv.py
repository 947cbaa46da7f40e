"""``fmeca.csv``: the FMECA worksheet, one row per failure mode, safe to open in a spreadsheet."""

from __future__ import annotations

import csv
import io

from clgate.fmt import printable
from clgate.reports.text import priority_text
from clgate.schemas.fmeca import FmecaWorksheet

FMECA_COLUMNS = [
    "rank",
    "class_id",
    "class_name",
    "task",
    "failure_mode",
    "S",
    "O_final",
    "O_worst",
    "D",
    "RPN_final",
    "RPN_worst",
    "priority_final",
    "priority_worst",
    "final_error",
    "worst_error",
    "worst_iteration",
    "seed",
]


CSV_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(cell: object) -> object:
    """A CSV cell that a spreadsheet will not run: text starting with ``= + - @``, tab or CR gets a ``'``;
    control characters are made visible (:func:`clgate.fmt.printable`).

    Numbers pass unchanged (a negative number is data, not a formula); class names and other text from
    the evaluation log are neutralised (OWASP "CSV injection").

    >>> print(csv_safe('=HYPERLINK("http://x", "y")'), csv_safe("+cmd|' /C calc'!A0"),
    ...       csv_safe("cat"), csv_safe(-1))
    '=HYPERLINK("http://x", "y") '+cmd|' /C calc'!A0 cat -1
    """
    if isinstance(cell, str):  # no ANSI escape nor control character reaches a terminal's `cat` either
        return ("'" if cell.startswith(CSV_FORMULA_STARTS) else "") + printable(cell)
    return cell


def fmeca_csv(sheet: FmecaWorksheet | None) -> str:
    """The worksheet as CSV, one row per failure mode, in the worksheet's order (priority, then RPN).

    Every text cell goes through :func:`csv_safe`, so a class name cannot become a spreadsheet formula.
    """
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\r\n")  # RFC 4180; a CR inside a cell is then quoted too
    w.writerow(FMECA_COLUMNS)
    for i, r in enumerate(sheet.rows if sheet else [], start=1):
        w.writerow(
            [
                csv_safe(cell)
                for cell in [
                    i,
                    r.class_id,
                    r.class_name,
                    r.task,
                    r.mode,
                    "" if r.severity is None else r.severity,
                    r.occurrence_final,
                    r.occurrence_worst,
                    r.detection,
                    "" if r.rpn_final is None else r.rpn_final,
                    "" if r.rpn_worst is None else r.rpn_worst,
                    priority_text(r.priority_final),
                    priority_text(r.priority_worst),
                    "" if r.final_error is None else f"{r.final_error:.6g}",
                    "" if r.worst_error is None else f"{r.worst_error:.6g}",
                    "" if r.worst_iteration is None else r.worst_iteration,
                    "" if r.seed is None else r.seed,
                ]
            ]
        )
    return buf.getvalue()
