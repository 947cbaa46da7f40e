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
from pathlib import Path
from typing import Any

from clgate.schemas.decision import Decision, RuleResult, decision_sha256
from clgate.schemas.fmeca import FmecaWorksheet

__all__ = [
    "REPORT_FILES",
    "fmeca_csv",
    "md_escape",
    "render_html",
    "render_input_error_junit",
    "render_input_error_markdown",
    "render_junit",
    "render_markdown",
    "write_reports",
]

REPORT_FILES = ("report.html", "report.md", "decision.json", "metrics.json", "fmeca.csv", "junit.xml")
_ICON = {"pass": "✅", "warn": "⚠️", "fail": "❌", "error": "⛔"}
_VERDICT_ICON = {"PASS": "✅", "WARN": "⚠️", "FAIL": "❌", "ERROR": "⛔"}


def fmt(x: Any, digits: int = 4) -> str:
    """Numbers for people: fixed digits, integers as integers, ``—`` for missing.

    >>> fmt(0.5), fmt(None), fmt(3.0), fmt(float("-inf"))
    ('0.5000', '—', '3', '-inf')
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


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


_MD_INLINE = re.compile(r"([\\`*_\[\]|~])")
_MD_ORDERED = re.compile(r"^(\d+)([.)])")


def md_escape(text: Any) -> str:
    """User-provided text (class names, rule ids, policy names, messages) made inert in Markdown.

    HTML becomes entities (a step summary or a PR comment renders ``<script>`` as text), Markdown
    syntax is escaped, and the text stays on one line (table cells, list items).

    >>> md_escape("<img src=x onerror=alert(1)>")
    '&lt;img src=x onerror=alert(1)&gt;'
    >>> md_escape("a|b *c* [l](u)\\n# h")
    'a\\\\|b \\\\*c\\\\* \\\\[l\\\\](u) # h'
    >>> md_escape("- item"), md_escape("1. item")
    ('\\\\- item', '1\\\\. item')
    """
    out = " ".join(str(text).splitlines())
    out = out.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    out = _MD_INLINE.sub(r"\\\1", out)
    if out[:1] in ("#", "+", "-", "=") and out:
        out = "\\" + out
    return _MD_ORDERED.sub(r"\1\\\2", out)


def render_markdown(decision: Decision, *, max_fmeca_rows: int = 5) -> str:
    """A short summary for a CI step summary or a pull-request comment (stable for a fixed decision)."""
    d = decision
    lines = [
        f"## {_VERDICT_ICON[d.verdict]} clgate gate: {d.verdict}",
        "",
        f"Policy **{md_escape(d.policy_name)}** v{md_escape(d.policy_version)} · {d.runs} run(s)"
        + (f" · strategy {md_escape(d.strategy)}" if d.strategy else "")
        + (f" · seeds {md_escape(', '.join(map(str, d.seeds)))}" if any(s is not None for s in d.seeds) else ""),
        "",
        md_escape(d.summary),
        "",
    ]
    for err in d.errors:
        lines.append(f"- ⛔ {md_escape(err)}")
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
            f"| {_ICON[r.status]} | {md_escape(r.id)}{sev} | {value} | {_md_cell(threshold_text(r))} "
            f"| {fmt(r.margin)} | {md_escape(ev)} |"
        )
    h = d.headline
    lines += [
        "",
        f"**Headline** (mean over runs): ACC {fmt(h.acc)} · MICA {fmt(h.mica)} · WAMICA {fmt(h.wamica)} · "
        f"min-ACC {fmt(h.min_acc)} · worst class at worst moment {fmt(h.min_class_acc)}"
        + (f" · class regression {fmt(h.class_regression)}" if h.class_regression is not None else ""),
    ]
    if h.worst_classes:
        worst = ", ".join(f"{md_escape(repr(w.name))} {fmt(w.accuracy, 3)}" for w in h.worst_classes[:3])
        lines.append(f"Worst classes (final accuracy): {worst}")
    if d.fmeca is not None and d.fmeca.rows:
        counts = {p: sum(1 for r in d.fmeca.rows if r.priority_worst == p) for p in ("High", "Medium", "Low")}
        lines += [
            "",
            (f"**FMECA**: {counts['High']} High · {counts['Medium']} Medium · {counts['Low']} Low action priority "
             "(worst error after learned)"),
            "",
            "| class | S | O final | O worst | D | RPN worst | priority |",
            "|---|---:|---:|---:|---:|---:|---|",
        ]
        for row in d.fmeca.rows[:max_fmeca_rows]:
            lines.append(
                f"| {md_escape(row.class_name)} | {row.severity} | {row.occurrence_final} | {row.occurrence_worst} "
                f"| {row.detection} | {row.rpn_worst} | {row.priority_worst} |"
            )
    lines += [
        "",
        f"<sub>clgate {d.clgate_version} · policy sha256 `{d.hashes.policy[:12]}` · "
        f"log(s) {', '.join(f'`{x[:12]}`' for x in d.hashes.logs)}"
        + (f" · baseline `{d.hashes.baseline[:12]}`" if d.hashes.baseline else "")
        + "</sub>",
        "",
    ]
    return "\n".join(lines)


def render_junit(decision: Decision) -> str:
    """JUnit XML: one test case per rule. FAIL → ``<failure>``, ERROR → ``<error>``, WARN → passing
    with a ``WARN:`` line in ``<system-out>`` and a ``status=warn`` property on the suite's list."""
    d = decision
    failures = sum(r.status == "fail" for r in d.rules)
    errors = sum(r.status == "error" for r in d.rules) + (1 if d.errors else 0)
    tests = len(d.rules) + (1 if d.errors else 0)
    suites = ET.Element("testsuites", name="clgate gate", tests=str(tests), failures=str(failures),
                        errors=str(errors))
    suite = ET.SubElement(suites, "testsuite", name=f"clgate gate: {d.policy_name} v{d.policy_version}",
                          tests=str(tests), failures=str(failures), errors=str(errors), skipped="0")
    props = ET.SubElement(suite, "properties")
    for name, value in (
        ("verdict", d.verdict),
        ("policy", f"{d.policy_name} v{d.policy_version}"),
        ("policy_sha256", d.hashes.policy),
        ("logs_sha256", ",".join(d.hashes.logs)),
        ("clgate_version", d.clgate_version),
        ("warnings", ",".join(r.id for r in d.rules if r.status == "warn")),
    ):
        ET.SubElement(props, "property", name=name, value=value)
    classname = f"clgate.gate.{d.policy_name}"
    if d.errors:
        case = ET.SubElement(suite, "testcase", classname=classname, name="inputs")
        err = ET.SubElement(case, "error", message=d.errors[0], type="ERROR")
        err.text = "\n".join(d.errors)
    for r in d.rules:
        case = ET.SubElement(suite, "testcase", classname=classname, name=f"rules[{r.index}] {r.id}")
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
        else:
            out = ET.SubElement(case, "system-out")
            out.text = ("WARN: " if r.status == "warn" else "PASS: ") + detail
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def render_input_error_junit(message: str) -> str:
    """JUnit XML for inputs that could not be judged (bad policy, bad log): one test case in error."""
    suites = ET.Element("testsuites", name="clgate gate", tests="1", failures="0", errors="1")
    suite = ET.SubElement(suites, "testsuite", name="clgate gate", tests="1", failures="0", errors="1",
                          skipped="0")
    case = ET.SubElement(suite, "testcase", classname="clgate.gate", name="inputs")
    first = message.splitlines()[0] if message else "invalid input"
    err = ET.SubElement(case, "error", message=first, type="ERROR")
    err.text = message
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def render_input_error_markdown(message: str) -> str:
    """The Markdown summary for inputs that could not be judged."""
    longest = max((len(run) for run in re.findall(r"`+", message)), default=0)
    fence = "`" * max(3, longest + 1)  # a fence longer than any backtick run in the message: it cannot close early
    return f"## {_VERDICT_ICON['ERROR']} clgate gate: ERROR (invalid input)\n\n{fence}\n{message}\n{fence}\n"


FMECA_COLUMNS = [
    "rank", "class_id", "class_name", "task", "failure_mode", "S", "O_final", "O_worst", "D",
    "RPN_final", "RPN_worst", "priority_final", "priority_worst", "final_error", "worst_error",
    "worst_iteration", "seed",
]


def fmeca_csv(sheet: FmecaWorksheet | None) -> str:
    """The worksheet as CSV, one row per failure mode, in the worksheet's order (priority, then RPN)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(FMECA_COLUMNS)
    for i, r in enumerate(sheet.rows if sheet else [], start=1):
        w.writerow([
            i, r.class_id, r.class_name, r.task, r.mode, r.severity, r.occurrence_final, r.occurrence_worst,
            r.detection, r.rpn_final, r.rpn_worst, r.priority_final, r.priority_worst,
            "" if r.final_error is None else f"{r.final_error:.6g}",
            "" if r.worst_error is None else f"{r.worst_error:.6g}",
            "" if r.worst_iteration is None else r.worst_iteration,
            "" if r.seed is None else r.seed,
        ])
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


def render_html(
    decision: Decision,
    *,
    metrics: Any | None = None,
    logs: Sequence[Any] = (),
    policy: Any | None = None,
) -> str:
    """One self-contained HTML file: decision and rules first, then figures, FMECA, provenance."""
    import jinja2

    from clgate.reports import figures

    figs: dict[str, str] = {}
    notes: list[str] = []
    if metrics is not None and metrics.runs:
        runs = metrics.runs
        figs["acc_mica"] = figures.acc_vs_mica(runs)
        figs["raa_raf"] = figures.raa_raf(runs)
        if logs:
            from clgate.metrics import LogArrays

            arrays = [LogArrays.from_log(log, task_accuracy=runs[0].task_accuracy) for log in logs]
            figs["boxplots"] = figures.class_boxplots(arrays)
            figs["stability_gap"] = figures.stability_gap(arrays[0], seed=logs[0].meta.get("seed"))
            if not arrays[0].continual:
                notes.append("The log was evaluated at task ends only: the stability gap between task "
                             "ends is not visible.")
    else:
        notes.append("No metrics: the inputs were invalid, figures are omitted.")

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("clgate.reports", "templates"),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["fmt"] = fmt
    env.globals.update(
        evidence_text=evidence_text, threshold_text=threshold_text, icon=_ICON,
        verdict_icon=_VERDICT_ICON, matrix_color=_matrix_color,
    )
    template = env.get_template("report.html.j2")
    return template.render(
        d=decision,
        figs=figs,
        notes=notes,
        policy=policy,
        provenance_json=json.dumps(decision.provenance, indent=2, sort_keys=True, default=str),
        decision_json=decision.model_dump_json(indent=2),
    )


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
) -> dict[str, Path]:
    """Write the six report files into ``out_dir`` (created); returns ``{file name: path}``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    metrics_doc: dict[str, Any] = {
        "format": "clgate.metrics/v1",
        "runs": json.loads(metrics.model_dump_json()) if metrics is not None else None,
        "baseline": json.loads(baseline_metrics.model_dump_json()) if baseline_metrics is not None else None,
    }
    contents = {
        "decision.json": decision_file(decision),
        "metrics.json": json.dumps(metrics_doc, indent=2) + "\n",
        "fmeca.csv": fmeca_csv(decision.fmeca),
        "junit.xml": render_junit(decision),
        "report.md": render_markdown(decision),
        "report.html": render_html(decision, metrics=metrics, logs=logs, policy=policy),
    }
    paths = {}
    for name in REPORT_FILES:
        path = out_dir / name
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(contents[name], encoding="utf-8")
        tmp.replace(path)
        paths[name] = path
    return paths
