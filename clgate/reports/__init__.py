"""Renderers for one gate decision, one module per format:

- :mod:`~clgate.reports.html_report` — ``report.html``, self-contained, with :mod:`~clgate.reports.figures`
- :mod:`~clgate.reports.markdown` — ``report.md``, the CI step summary / PR comment
- :mod:`~clgate.reports.decision_json` — ``decision.json`` (with its hash) and ``metrics.json``
- :mod:`~clgate.reports.fmeca_csv` — ``fmeca.csv``
- :mod:`~clgate.reports.junit` — ``junit.xml``
- :mod:`~clgate.reports.pdf` — ``report.pdf`` (headless Chromium)
- :mod:`~clgate.reports.files` — all of them into one folder (:func:`write_reports`)

and :mod:`~clgate.reports.text`, the words they share. The text renderers read the decision only and
are stable: the same decision gives the same bytes. :func:`render_html` also draws the figures from the
metrics and the logs (matplotlib, imported on use). This package re-exports each renderer.
"""

from __future__ import annotations

from clgate.fmt import fmt
from clgate.reports.decision_json import decision_file, metrics_file
from clgate.reports.files import REPORT_FILES, write_reports
from clgate.reports.fmeca_csv import CSV_FORMULA_STARTS, FMECA_COLUMNS, csv_safe, fmeca_csv
from clgate.reports.html_report import css_string, model_label, render_html
from clgate.reports.junit import render_input_error_junit, render_junit
from clgate.reports.markdown import md_text, render_input_error_markdown, render_markdown
from clgate.reports.pdf import CHROMIUM_NAMES, PdfError, find_chromium, write_pdf
from clgate.reports.text import (
    column_word,
    column_words,
    evidence_text,
    fmeca_counts,
    fmeca_note,
    pct,
    pooled_counts_text,
    threshold_text,
    worst_moment_text,
    worst_pooled_text,
)

__all__ = [
    "CHROMIUM_NAMES",
    "CSV_FORMULA_STARTS",
    "FMECA_COLUMNS",
    "REPORT_FILES",
    "PdfError",
    "column_word",
    "column_words",
    "css_string",
    "csv_safe",
    "decision_file",
    "evidence_text",
    "find_chromium",
    "fmeca_counts",
    "fmeca_csv",
    "fmeca_note",
    "fmt",
    "md_text",
    "metrics_file",
    "model_label",
    "pct",
    "pooled_counts_text",
    "render_html",
    "render_input_error_junit",
    "render_input_error_markdown",
    "render_junit",
    "render_markdown",
    "threshold_text",
    "worst_moment_text",
    "worst_pooled_text",
    "write_pdf",
    "write_reports",
]
