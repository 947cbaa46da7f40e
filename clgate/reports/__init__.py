"""Renderers for one gate decision: HTML (self-contained, with figures), Markdown, JUnit XML, CSV, JSON.

The text renderers (:func:`render_markdown`, :func:`render_junit`, :func:`fmeca_csv`) read the
decision only, and are stable: the same decision gives the same bytes. :func:`render_html` also draws
the figures from the metrics and the logs (matplotlib, imported on use).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from clgate.fmt import fmt
from clgate.metrics import LogArrays
from clgate.schemas.decision import Decision, RuleResult, decision_sha256
from clgate.schemas.fmeca import FmecaWorksheet

__all__ = [
    "REPORT_FILES",
    "PdfError",
    "find_chromium",
    "fmeca_csv",
    "md_text",
    "pct",
    "render_html",
    "render_input_error_junit",
    "render_input_error_markdown",
    "render_junit",
    "render_markdown",
    "write_pdf",
    "write_reports",
]

REPORT_FILES = ("report.html", "report.md", "decision.json", "metrics.json", "fmeca.csv", "junit.xml")
_ICON = {"pass": "✅", "warn": "⚠️", "fail": "❌", "error": "⛔"}
_VERDICT_ICON = {"PASS": "✅", "WARN": "⚠️", "FAIL": "❌", "ERROR": "⛔"}


def threshold_text(r: RuleResult) -> str:
    if r.threshold is None or r.comparison is None:
        return "—"
    return f"{r.comparison} {fmt(r.threshold)}"


def evidence_text(ev: dict[str, Any]) -> str:
    """The evidence in a few words: task, class, iteration, seed.

    >>> evidence_text({"task": 3, "class_name": "7", "iteration": 450, "seed": 1})
    "task 3, class '7', iteration 450, seed 1"
    """
    parts = []
    if "task" in ev:
        parts.append(f"task {ev['task']}")
    if "class_name" in ev:
        parts.append(f"class {ev['class_name']!r}")
    if "iteration" in ev:
        parts.append(f"iteration {ev['iteration']}")
    detail = ev.get("detail")
    if isinstance(detail, dict):
        for key in ("class_name", "class", "iteration"):
            if key in detail and key not in ev and not (key == "class" and "class_name" in detail):
                label = "class" if key.startswith("class") else key
                parts.append(f"{label} {detail[key]!r}" if label == "class" else f"{label} {detail[key]}")
    if ev.get("failing_tasks"):
        parts.append("failing tasks " + ",".join(map(str, ev["failing_tasks"])))
    if "seed" in ev:
        parts.append(f"seed {ev['seed']}")
    elif ev.get("over_runs") == "mean":
        parts.append("mean over runs")
    return ", ".join(parts) or "—"


_MD_SPECIAL = re.compile(r"([\\`*_\[\]#!|~])")
_MD_ORDERED = re.compile(r"^(\d+)([.)])")


def md_text(text: Any) -> str:
    """User text (class names, rule ids, messages) made inert in Markdown: one line, Markdown
    punctuation backslash-escaped, ``&``, ``<`` and ``>`` as entities (no raw HTML; links and tables cannot
    break).
    The one escaping helper of the Markdown renderer; HTML relies on Jinja's autoescape.

    >>> print(md_text("a|b *c* <script>"))
    a\\|b \\*c\\* &lt;script&gt;
    """
    t = " ".join(str(text).splitlines())
    t = t.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    t = _MD_SPECIAL.sub(r"\\\1", t)
    t = _MD_ORDERED.sub(r"\1\\\2", t)  # "1. x" would start an ordered list
    return "\\" + t if t[:1] in ("-", "+", "=", ">") else t  # no list, quote or heading at a line's start


def css_string(text: Any) -> str:
    """User text as a quoted CSS string (the printed page header): every character other than letters,
    digits, space and ``.,:-`` as a CSS hex escape, so nothing can close the string or the style sheet.
    The one escaping helper for CSS.

    >>> print(css_string('a"b</style>'))
    "a\\22 b\\3c \\2f style\\3e "
    """
    out = ['"']
    for ch in " ".join(str(text).splitlines()):
        out.append(ch if ch.isascii() and (ch.isalnum() or ch in " .,:-") else f"\\{ord(ch):x} ")
    out.append('"')
    return "".join(out)


def pct(x: float | None, digits: int = 1) -> str:
    """An error rate (a fraction) as a percentage for people.

    >>> pct(1.0), pct(0.0278), pct(None), pct(0.0)
    ('100.0 %', '2.8 %', '—', '0.0 %')
    """
    if x is None or not math.isfinite(x):
        return "—"
    return f"{100 * x:.{digits}f} %"


def worst_moment_text(decision: Decision) -> str:
    """The worst class at its worst moment, named: class, accuracy, iteration, seed.

    >>> from clgate.schemas.decision import Headline, WorstMoment
    >>> class D: headline = Headline(min_class_acc=0.0, worst_moment=WorstMoment(
    ...     class_id=3, class_name="3", task=2, accuracy=0.0, iteration=450, seed=0))
    >>> worst_moment_text(D())
    "class '3' (task 2) at 0.0000, iteration 450, seed 0"
    """
    w = decision.headline.worst_moment
    if w is None:
        return fmt(decision.headline.min_class_acc)
    where = [f"iteration {w.iteration}"] if w.iteration is not None else []
    if w.seed is not None:
        where.append(f"seed {w.seed}")
    tail = ", " + ", ".join(where) if where else ""
    return f"class {w.class_name!r} (task {w.task}) at {fmt(w.accuracy)}{tail}"


def fmeca_note(decision: Decision) -> str | None:
    """Why the verdict and the worksheet may seem to disagree: a PASS (or WARN) with High modes, and
    modes that nobody rated. None when there is nothing to explain."""
    sheet = decision.fmeca
    if sheet is None or not sheet.rows:
        return None
    parts = []
    high = [r for r in sheet.rows if r.priority_worst == "High"]
    if high and decision.verdict in ("PASS", "WARN"):
        names = ", ".join(repr(r.class_name) for r in high[:5]) + (" …" if len(high) > 5 else "")
        rules = [r for r in decision.rules if r.kind == "fmeca"]
        if not rules:
            why = (
                "this policy has no FMECA rule: the worksheet ranks the risks for review, "
                "the rules decide the release"
            )
        elif any(r.status == "warn" for r in rules):
            why = (
                "the policy's FMECA rule(s) "
                + ", ".join(repr(r.id) for r in rules if r.status == "warn")
                + (" found them but only warn (severity: warn)")
            )
        else:
            why = (
                "the policy's FMECA rule(s) "
                + ", ".join(f"{r.id!r} ({r.status})" for r in rules)
                + (" judge another occurrence (final/worst) or priority level")
            )
        parts.append(
            f"{decision.verdict} with {len(high)} High-priority failure mode(s) ({names}; worst error after "
            f"learned): {why}."
        )
    if sheet.unrated:
        parts.append(
            f"{sheet.unrated} of {len(sheet.rows)} failure mode(s) are unrated: the policy gives them no "
            "severity (fmeca.severity / fmeca.default_severity), so they have no RPN or priority."
        )
    return " ".join(parts) or None


def fmeca_counts(sheet: FmecaWorksheet) -> str:
    """How many modes at each action priority, for the worst error after learned and the final error.

    >>> from clgate.schemas.fmeca import FmecaWorksheet
    >>> fmeca_counts(FmecaWorksheet(rows=[], matrix=[]))
    'worst error after learned: 0 High · 0 Medium · 0 Low; final error: 0 High · 0 Medium · 0 Low'
    """
    parts = []
    for label, attr in (("worst error after learned", "priority_worst"), ("final error", "priority_final")):
        n = {p: sum(1 for r in sheet.rows if getattr(r, attr) == p) for p in ("High", "Medium", "Low")}
        parts.append(f"{label}: {n['High']} High · {n['Medium']} Medium · {n['Low']} Low")
    return "; ".join(parts) + (f"; {sheet.unrated} unrated" if sheet.unrated else "")


def _priority(p: str | None) -> str:
    return "unrated" if p is None else p


def render_markdown(decision: Decision, *, report_url: str | None = None, max_fmeca_rows: int = 10) -> str:
    """A short summary for a CI step summary or a pull-request comment (stable for a fixed decision).

    ``report_url``: where the full HTML report will be (linked at the top). The FMECA lists its top
    ``max_fmeca_rows`` rows and says how many more the full report and fmeca.csv have.
    """
    d = decision
    lines = [
        f"## {_VERDICT_ICON[d.verdict]} clgate gate: {d.verdict}",
        "",
        f"Policy **{md_text(d.policy_name)}** v{md_text(d.policy_version)} · {d.runs} run(s)"
        + (f" · strategy {md_text(d.strategy)}" if d.strategy else "")
        + (
            f" · seeds {md_text(', '.join(map(str, d.seeds)))}" if any(s is not None for s in d.seeds) else ""
        ),
        "",
    ]
    if report_url:
        lines += [f"[Full report (figures, FMECA worksheet, provenance)](<{_md_url(report_url)}>)", ""]
    lines += [md_text(d.summary), ""]
    for err in d.errors:
        lines.append(f"- ⛔ {md_text(err)}")
    if d.errors:
        lines.append("")
    lines += [
        "| | rule | value | threshold | margin | evidence |",
        "|---|---|---:|---|---:|---|",
    ]
    for r in d.rules:
        value = fmt(r.value) if r.status != "error" else "error"
        ev = evidence_text(r.evidence) if r.status != "error" else r.message
        sev = " (warn)" if r.severity == "warn" else ""
        lines.append(
            f"| {_ICON[r.status]} | {md_text(r.id)}{sev} | {value} | {md_text(threshold_text(r))} "
            f"| {fmt(r.margin)} | {md_text(ev)} |"
        )
    h = d.headline
    lines += [
        "",
        f"**Headline** (mean over runs): ACC {fmt(h.acc)} · MICA {fmt(h.mica)} · WAMICA {fmt(h.wamica)} · "
        f"min-ACC {fmt(h.min_acc)}"
        + (f" · class regression {fmt(h.class_regression)}" if h.class_regression is not None else ""),
        "",
        f"**Worst class at its worst moment**: {md_text(worst_moment_text(d))}",
    ]
    if h.worst_classes:
        worst = ", ".join(f"{md_text(repr(w.name))} {fmt(w.accuracy, 3)}" for w in h.worst_classes[:3])
        lines += ["", f"Worst classes (final accuracy): {worst}"]
    if d.fmeca is not None and d.fmeca.rows:
        rows = d.fmeca.rows
        shown = rows[:max_fmeca_rows]
        lines += [
            "",
            (
                f"**FMECA** ({len(rows)} failure modes, top {len(shown)} shown), action priority by "
                f"{fmeca_counts(d.fmeca)}"
            ),
        ]
        note = fmeca_note(d)
        if note:
            lines += ["", f"> {md_text(note)}"]
        lines += [
            "",
            "| # | class | task | S | final error | worst error | at | O worst | D | RPN worst | priority |",
            "|---:|---|---:|---:|---:|---:|---|---:|---:|---:|---|",
        ]
        for i, row in enumerate(shown, start=1):
            at = (
                ", ".join(
                    ([f"iteration {row.worst_iteration}"] if row.worst_iteration is not None else [])
                    + ([f"seed {row.seed}"] if row.seed is not None and d.runs > 1 else [])
                )
                or "—"
            )
            lines.append(
                f"| {i} | {md_text(row.class_name)} | {row.task} | {fmt(row.severity)} | "
                f"{pct(row.final_error)} "
                f"| {pct(row.worst_error)} | {md_text(at)} | {row.occurrence_worst} | {row.detection} "
                f"| {fmt(row.rpn_worst)} | {_priority(row.priority_worst)} |"
            )
        if len(rows) > len(shown):
            where = f"the [full report](<{_md_url(report_url)}>)" if report_url else "report.html"
            lines += ["", f"{len(rows) - len(shown)} more failure mode(s) in {where} and fmeca.csv."]
    lines += [
        "",
        f"<sub>clgate {md_text(d.clgate_version)} · policy sha256 `{d.hashes.policy[:12]}` · "
        f"log(s) {', '.join(f'`{x[:12]}`' for x in d.hashes.logs)}"
        + (f" · baseline `{d.hashes.baseline[:12]}`" if d.hashes.baseline else "")
        + "</sub>",
        "",
    ]
    return "\n".join(lines)


def _md_url(url: str) -> str:
    """A URL inside ``<…>`` link syntax: no spaces, angle brackets or line breaks can end it early."""
    return "".join(c if c.isprintable() and c not in " <>" else f"%{ord(c):02X}" for c in url)


def _junit_timestamp(when: datetime | None) -> str:
    """ISO 8601 without a zone, in UTC, to the second (what the JUnit XSD and CI tools parse)."""
    when = when or datetime.now(UTC)
    if when.tzinfo is not None:
        when = when.astimezone(UTC).replace(tzinfo=None)
    return when.replace(microsecond=0).isoformat()


def render_junit(decision: Decision, *, timestamp: datetime | None = None, time_s: float = 0.0) -> str:
    """JUnit XML: one test case per rule. FAIL → ``<failure>``, ERROR → ``<error>``, WARN →
    ``<skipped message="WARN: …">`` (GitLab, Jenkins and GitHub test reporters show skipped, not green;
    the job's exit code still follows the verdict), PASS → a plain test case.

    The suite name is ``clgate gate: <policy name>`` without the version, so a CI's test history
    continues across policy versions (the version is a property). ``time`` is the gate's wall time in
    seconds (``time_s``), ``timestamp`` when it ran (``timestamp``, default now)."""
    d = decision
    failures = sum(r.status == "fail" for r in d.rules)
    errors = sum(r.status == "error" for r in d.rules) + (1 if d.errors else 0)
    skipped = sum(r.status == "warn" for r in d.rules)
    tests = len(d.rules) + (1 if d.errors else 0)
    total_time = f"{max(time_s, 0.0):.3f}"
    suites = ET.Element(
        "testsuites",
        name="clgate gate",
        tests=str(tests),
        failures=str(failures),
        errors=str(errors),
        skipped=str(skipped),
        time=total_time,
    )
    suite = ET.SubElement(
        suites,
        "testsuite",
        name=f"clgate gate: {d.policy_name}",
        tests=str(tests),
        failures=str(failures),
        errors=str(errors),
        skipped=str(skipped),
        time=total_time,
        timestamp=_junit_timestamp(timestamp),
    )
    props = ET.SubElement(suite, "properties")
    for name, value in (
        ("verdict", d.verdict),
        ("policy", f"{d.policy_name} v{d.policy_version}"),
        ("policy_version", d.policy_version),
        ("policy_sha256", d.hashes.policy),
        ("logs_sha256", ",".join(d.hashes.logs)),
        ("clgate_version", d.clgate_version),
        ("warnings", ",".join(r.id for r in d.rules if r.status == "warn")),
    ):
        ET.SubElement(props, "property", name=name, value=value)
    classname = f"clgate.gate.{d.policy_name}"
    if d.errors:
        case = ET.SubElement(suite, "testcase", classname=classname, name="inputs", time="0")
        err = ET.SubElement(case, "error", message=d.errors[0], type="ERROR")
        err.text = "\n".join(d.errors)
    for r in d.rules:
        case = ET.SubElement(
            suite, "testcase", classname=classname, name=f"rules[{r.index}] {r.id}", time="0"
        )
        detail = (
            f"{r.message}\nvalue={fmt(r.value)} threshold={threshold_text(r)} margin={fmt(r.margin)} "
            f"severity={r.severity}\nevidence: {json.dumps(r.evidence, sort_keys=True, default=str)}"
        )
        if r.status == "fail":
            el = ET.SubElement(case, "failure", message=r.message, type="FAIL")
            el.text = detail
        elif r.status == "error":
            el = ET.SubElement(case, "error", message=r.message, type="ERROR")
            el.text = detail
        elif r.status == "warn":
            el = ET.SubElement(case, "skipped", message=f"WARN: {r.message}")
            el.text = "WARN: " + detail
        else:
            out = ET.SubElement(case, "system-out")
            out.text = "PASS: " + detail
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def render_input_error_junit(message: str) -> str:
    """JUnit XML for inputs that could not be judged (bad policy, bad log): one test case in error."""
    suites = ET.Element(
        "testsuites", name="clgate gate", tests="1", failures="0", errors="1", skipped="0", time="0.000"
    )
    suite = ET.SubElement(
        suites,
        "testsuite",
        name="clgate gate",
        tests="1",
        failures="0",
        errors="1",
        skipped="0",
        time="0.000",
        timestamp=_junit_timestamp(None),
    )
    case = ET.SubElement(suite, "testcase", classname="clgate.gate", name="inputs", time="0")
    first = message.splitlines()[0] if message else "invalid input"
    err = ET.SubElement(case, "error", message=first, type="ERROR")
    err.text = message
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def render_input_error_markdown(message: str) -> str:
    """The Markdown summary for inputs that could not be judged."""
    longest = max((len(run) for run in re.findall(r"`+", message)), default=0)
    fence = "`" * max(
        3, longest + 1
    )  # a fence longer than any backtick run in the message: it cannot close early
    return f"## {_VERDICT_ICON['ERROR']} clgate gate: ERROR (invalid input)\n\n{fence}\n{message}\n{fence}\n"


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
    """A CSV cell that a spreadsheet will not run: text starting with ``= + - @``, tab or CR gets a ``'``.

    Numbers pass unchanged (a negative number is data, not a formula); class names and other text from
    the evaluation log are neutralised (OWASP "CSV injection").

    >>> print(csv_safe('=HYPERLINK("http://x", "y")'), csv_safe("+cmd|' /C calc'!A0"),
    ...       csv_safe("cat"), csv_safe(-1))
    '=HYPERLINK("http://x", "y") '+cmd|' /C calc'!A0 cat -1
    """
    if isinstance(cell, str) and cell.startswith(CSV_FORMULA_STARTS):
        return "'" + cell
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
                    _priority(r.priority_final),
                    _priority(r.priority_worst),
                    "" if r.final_error is None else f"{r.final_error:.6g}",
                    "" if r.worst_error is None else f"{r.worst_error:.6g}",
                    "" if r.worst_iteration is None else r.worst_iteration,
                    "" if r.seed is None else r.seed,
                ]
            ]
        )
    return buf.getvalue()


def _matrix_color(s: int, o: int) -> str:
    risk = s * o
    if risk >= 56:
        return "#f4a6a6"
    if risk >= 30:
        return "#f9d49b"
    if risk >= 12:
        return "#fbf1a9"
    return "#d8efd3"


def model_label(decision: Decision, logs: Sequence[Any] = ()) -> str:
    """What the report is about, for its header: the caller's ``model`` (provenance) or the logs'
    model and strategy."""
    given = decision.provenance.get("model")
    if given:
        return str(given)
    meta = logs[0].meta if logs else {}
    parts = [str(x) for x in (meta.get("model"), decision.strategy or meta.get("strategy")) if x]
    return " · ".join(parts) or "model not recorded"


def render_html(
    decision: Decision,
    *,
    metrics: Any | None = None,
    logs: Sequence[Any] = (),
    policy: Any | None = None,
    generated_at: datetime | None = None,
) -> str:
    """One self-contained HTML file: decision and rules first, then figures, FMECA, provenance.

    Screen: full-width figures, tables that reflow into cards on narrow screens. Print (and the PDF):
    a header with model, verdict, policy and date on every page, rows and figures not split,
    provenance printed in full."""
    import jinja2

    # lazy: matplotlib — slow to import, loaded only when figures are drawn
    from clgate.reports import figures

    figs: dict[str, str] = {}
    notes: list[str] = []
    if metrics is not None and metrics.runs:
        runs = metrics.runs
        figs["acc_mica"] = figures.acc_vs_mica(runs)
        figs["raa_raf"] = figures.raa_raf(runs)
        if logs:
            arrays = [LogArrays.from_log(log, task_accuracy=runs[0].task_accuracy) for log in logs]
            figs["boxplots"] = figures.class_boxplots(arrays)
            # the heatmap of the run with the worst moment (the first run when there is none)
            w = decision.headline.worst_moment
            seeds = [log.meta.get("seed", i) for i, log in enumerate(logs)]
            j = seeds.index(w.seed) if w is not None and w.seed in seeds else 0
            figs["heatmap"] = figures.class_heatmap(arrays[j], seed=seeds[j], worst=w)
            figs["stability_gap"] = figures.stability_gap(arrays[0], seed=logs[0].meta.get("seed"))
            if not arrays[0].continual:
                notes.append(
                    "The log was evaluated at task ends only: the stability gap between task "
                    "ends is not visible."
                )
    else:
        notes.append("No metrics: the inputs were invalid, figures are omitted.")

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("clgate.reports", "templates"),
        autoescape=True,  # every value is escaped; only the figures' SVG is marked safe
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["fmt"] = fmt
    env.filters["pct"] = pct
    env.filters["css_string"] = css_string
    env.globals.update(
        evidence_text=evidence_text,
        threshold_text=threshold_text,
        icon=_ICON,
        verdict_icon=_VERDICT_ICON,
        matrix_color=_matrix_color,
        fmeca_counts=fmeca_counts,
    )
    template = env.get_template("report.html.j2")
    when = (generated_at or datetime.now(UTC)).astimezone(UTC)
    return template.render(
        d=decision,
        figs=figs,
        notes=notes,
        policy=policy,
        model=model_label(decision, logs),
        date=when.strftime("%Y-%m-%d %H:%M UTC"),
        page_header=(
            f"{model_label(decision, logs)} · {decision.verdict} · policy {decision.policy_name} "
            f"v{decision.policy_version} · {when.strftime('%Y-%m-%d %H:%M UTC')}"
        ),
        worst_moment=worst_moment_text(decision),
        fmeca_note=fmeca_note(decision),
        provenance_json=json.dumps(decision.provenance, indent=2, sort_keys=True, default=str),
        decision_json=decision.model_dump_json(indent=2),
    )


class PdfError(RuntimeError):
    """The PDF could not be written (no Chromium, or Chromium failed); the message says which and why."""


CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


def find_chromium() -> str | None:
    """``$CLGATE_CHROMIUM`` if set, else the first Chromium or Chrome on ``PATH``."""
    import os
    import shutil

    given = os.environ.get("CLGATE_CHROMIUM")
    if given:
        return shutil.which(given) or (given if Path(given).is_file() else None)
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def write_pdf(html_path: Path, pdf_path: Path | None = None, *, timeout_s: float = 120.0) -> Path:
    """Print ``report.html`` to ``report.pdf`` beside it with headless Chromium (the report's print
    stylesheet: header on every page, rows not split, provenance printed).

    Raises :class:`PdfError` with a clear message when no Chromium is installed or it fails; callers
    report it and go on (the other report files are already written)."""
    import os
    import subprocess
    import tempfile

    html_path = Path(html_path).resolve()
    pdf_path = Path(pdf_path) if pdf_path is not None else html_path.with_suffix(".pdf")
    chromium = find_chromium()
    if chromium is None:
        raise PdfError(
            "no Chromium found (looked for $CLGATE_CHROMIUM, " + ", ".join(CHROMIUM_NAMES) + " on PATH): "
            "install chromium (Debian: apt-get install chromium) to get report.pdf; "
            "the other reports are written"
        )
    tmp = pdf_path.with_name(pdf_path.name + ".tmp")
    with tempfile.TemporaryDirectory(prefix="clgate-chromium-") as profile:
        # Chromium refuses to run as root with its sandbox (containers); elsewhere the sandbox stays on
        no_sandbox = ["--no-sandbox"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
        cmd = [
            chromium,
            "--headless",
            *no_sandbox,
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--no-pdf-header-footer",
            "--run-all-compositor-stages-before-draw",
            f"--print-to-pdf={tmp}",
            html_path.as_uri(),
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise PdfError(f"Chromium ({chromium}) could not print the report: {exc}") from None
    if proc.returncode != 0 or not tmp.is_file() or tmp.stat().st_size == 0:
        tmp.unlink(missing_ok=True)
        tail = (proc.stderr or "").strip().splitlines()[-3:]
        raise PdfError(f"Chromium ({chromium}) exited {proc.returncode} without a PDF: " + " | ".join(tail))
    tmp.replace(pdf_path)
    return pdf_path


def decision_file(decision: Decision) -> str:
    """``decision.json``: the decision document plus ``sha256``, the hash of the rest of it
    (:func:`clgate.schemas.decision.decision_sha256`; ``clgate audit verify --decision FILE`` checks it)."""
    document = decision.model_dump(mode="json")
    document["sha256"] = decision_sha256(document)
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def write_reports(
    decision: Decision,
    out_dir: Path,
    *,
    metrics: Any | None = None,
    baseline_metrics: Any | None = None,
    logs: Sequence[Any] = (),
    policy: Any | None = None,
    report_url: str | None = None,
    generated_at: datetime | None = None,
    elapsed_s: float = 0.0,
) -> dict[str, Path]:
    """Write the six report files into ``out_dir`` (created); returns ``{file name: path}``.

    ``report_url``: where report.html will be served (report.md links to it). ``generated_at`` and
    ``elapsed_s``: the date in the HTML header and JUnit's ``timestamp``/``time``. The PDF is separate:
    :func:`write_pdf` (it needs Chromium)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    when = generated_at or datetime.now(UTC)
    metrics_doc: dict[str, Any] = {
        "format": "clgate.metrics/v1",
        "runs": json.loads(metrics.model_dump_json()) if metrics is not None else None,
        "baseline": json.loads(baseline_metrics.model_dump_json()) if baseline_metrics is not None else None,
    }
    contents = {
        "decision.json": decision_file(decision),
        "metrics.json": json.dumps(metrics_doc, indent=2) + "\n",
        "fmeca.csv": fmeca_csv(decision.fmeca),
        "junit.xml": render_junit(decision, timestamp=when, time_s=elapsed_s),
        "report.md": render_markdown(decision, report_url=report_url),
        "report.html": render_html(decision, metrics=metrics, logs=logs, policy=policy, generated_at=when),
    }
    paths = {}
    for name in REPORT_FILES:
        path = out_dir / name
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(contents[name], encoding="utf-8")
        tmp.replace(path)
        paths[name] = path
    return paths
