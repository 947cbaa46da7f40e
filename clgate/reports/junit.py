"""``junit.xml``: one test case per rule, for CI test reporters (stable for a fixed decision and time)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from typing import Any

from clgate.fmt import fmt, printable
from clgate.reports.text import threshold_text
from clgate.schemas.decision import Decision


def _junit_timestamp(when: datetime | None) -> str:
    """ISO 8601 without a zone, in UTC, to the second (what the JUnit XSD and CI tools parse)."""
    when = when or datetime.now(UTC)
    if when.tzinfo is not None:
        when = when.astimezone(UTC).replace(tzinfo=None)
    return when.replace(microsecond=0).isoformat()


def _build_properties(provenance: dict[str, Any]) -> list[tuple[str, str]]:
    """The candidate and the build as JUnit properties (only those the provenance has)."""
    candidate = provenance.get("candidate") or {}
    build = provenance.get("build") or {}
    pairs = (
        ("candidate", candidate.get("name")),
        ("candidate_version", candidate.get("version")),
        ("commit", build.get("commit")),
        ("ci", build.get("ci")),
        ("ci_run_url", build.get("run_url")),
    )
    return [(name, str(value)) for name, value in pairs if value]


def cell_text(decision: Decision, evidence: dict[str, Any]) -> str | None:
    """NI/NIC decisions: what the cell that ``evidence`` names (its ``class_name``, at the top or in its
    ``detail``) is — its class and sample group — since the evidence's keys, a contract, say class; None
    for an NC decision or evidence that names no cell.

    >>> from clgate.schemas.decision import Headline, PooledClassResult
    >>> p = PooledClassResult(id=0, name="cat", accuracy=0.65, cells=["cat @ day", "cat @ night"])
    >>> class D: headline = Headline(pooled_classes=[p])
    >>> cell_text(D(), {"detail": {"class": 2, "class_name": "cat @ night"}})
    "cell 'cat @ night' = class 'cat' on sample group 'night' (the evidence's class_name names a cell)"
    """
    pooled = decision.headline.pooled_classes
    detail = evidence.get("detail")
    name = evidence.get("class_name") or (detail.get("class_name") if isinstance(detail, dict) else None)
    if pooled is None or not isinstance(name, str):
        return None
    owner = next((p.name for p in pooled if name in p.cells), None)
    if owner is None or not name.startswith(f"{owner} @ "):
        return f"cell {name!r} (the evidence's class_name names a cell: a class on one task's sample group)"
    group = name[len(owner) + 3 :]
    return (
        f"cell {name!r} = class {owner!r} on sample group {group!r} (the evidence's class_name names a cell)"
    )


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
        *_build_properties(d.provenance),
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
        cell = cell_text(d, r.evidence)
        if cell is not None:  # NI/NIC: wording only, the XML's elements and attributes stay the same
            detail += f"\n{cell}"
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
    return _serialise(suites)


def _serialise(root: ET.Element) -> str:
    """The document, every attribute and text made valid XML 1.0 first (:func:`clgate.fmt.printable`:
    a policy or class name with control characters, ANSI escapes or lone surrogates cannot break it)."""
    for el in root.iter():
        el.attrib = {k: printable(v) for k, v in el.attrib.items()}
        if el.text:
            el.text = printable(el.text)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


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
    return _serialise(suites)
