"""Reports: HTML in a real headless Chromium, JUnit through a JUnit reader, Markdown against a golden file."""

from __future__ import annotations

import csv
import io
import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from clgate.gate import gate_logs
from clgate.reports import REPORT_FILES, fmeca_csv, render_junit, render_markdown

GOLDEN = Path(__file__).parent / "golden"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

RULES = [
    {"metric": "acc", "floor": 0.8},
    {"metric": "mica", "at": "worst", "floor": 0.7, "id": "worst-class"},
    {"metric": "min_class_acc", "floor": 0.25, "severity": "warn"},
    {"metric": "wf10", "ceiling": 0.5, "severity": "warn"},
    {"classes": ["bee", "cat"], "at": "min_after_learned", "floor": 0.8},
    {"fmeca": "rpn", "limit": 500},
    {"baseline": "mica", "max_drop": 0.1},
]


# a provenance as long as a CI's (candidate, build, paths): long enough for a page break to split it
CI_LIKE = {f"ci_variable_{i:02d}": f"value {i}" for i in range(18)}


@pytest.fixture
def gated(tmp_path, forgetful_log, policy_of):
    policy = policy_of(*RULES, fmeca={"default_severity": 6, "severity": {"ant": 9}, "default_detection": 4})
    return gate_logs(
        [forgetful_log(seed=3)], policy, out_dir=tmp_path / "out", provenance={"test": "reports", **CI_LIKE}
    )


def test_all_files_written(gated):
    assert set(gated.files) == set(REPORT_FILES)
    assert json.loads(gated.files["decision.json"].read_text())["verdict"] == "ERROR"  # no baseline given
    metrics = json.loads(gated.files["metrics.json"].read_text())
    assert metrics["runs"]["runs"][0]["metrics"]["mica"][-1] == pytest.approx(0.5)


def test_junit_parsed_by_a_junit_reader(gated):
    from junitparser import Error, Failure, JUnitXml

    xml = JUnitXml.fromfile(str(gated.files["junit.xml"]))
    suites = list(xml)
    assert len(suites) == 1
    suite = suites[0]
    cases = list(suite)
    assert len(cases) == len(RULES)
    by_name = {c.name: c for c in cases}
    failed = by_name["rules[1] worst-class"]
    assert any(isinstance(r, Failure) for r in failed.result)
    warned = by_name["rules[2] min_class_acc >= 0.25"]
    assert not any(isinstance(r, (Failure, Error)) for r in warned.result)
    assert warned.is_skipped and warned.result[0].message.startswith("WARN: ")  # not green in CI
    errored = by_name["rules[6] baseline mica drop <= 0.1"]
    assert any(isinstance(r, Error) for r in errored.result)
    passed = by_name["rules[0] acc >= 0.8"]
    assert passed.is_passed and "PASS:" in passed.system_out
    assert suite.failures == sum(r.status == "fail" for r in gated.decision.rules)
    assert suite.errors == 1
    props = {p.name: p.value for p in suite.properties()}
    assert props["verdict"] == "ERROR" and "min_class_acc >= 0.25" in props["warnings"]
    # stable suite name (no policy version: CI test history survives a policy change), time, timestamp
    assert suite.name == "clgate gate: test" and props["policy_version"] == "1"
    assert suite.skipped == 1 and float(suite.time) >= 0.0
    assert datetime.fromisoformat(suite.timestamp).year >= 2024


def test_junit_warn_is_not_a_failure(forgetful_log, policy_of):
    from junitparser import JUnitXml

    d = gate_logs([forgetful_log()], policy_of({"metric": "mica", "floor": 0.9, "severity": "warn"})).decision
    assert d.verdict == "WARN"
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    text = render_junit(d, timestamp=when, time_s=1.25)
    assert text == render_junit(d, timestamp=when, time_s=1.25)  # stable for fixed inputs
    xml = JUnitXml.fromstring(text)
    suite = next(iter(xml))
    case = next(iter(suite))
    assert case.is_skipped and not case.is_passed
    assert case.result[0].message.startswith("WARN: ") and "mica" in case.result[0].text
    assert suite.timestamp == "2026-01-02T03:04:05" and suite.time == 1.25 and suite.skipped == 1


def test_markdown_is_stable_golden(gated):
    text = render_markdown(gated.decision)
    assert text == render_markdown(gated.decision.model_copy(deep=True))
    # regenerate deliberately when the format changes: CLGATE_REGEN_GOLDEN=1 pytest tests/reports -k golden
    golden = GOLDEN / "report.md"
    if os.environ.get("CLGATE_REGEN_GOLDEN"):
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(text, encoding="utf-8")
    assert text == golden.read_text(encoding="utf-8")
    assert gated.files["report.md"].read_text(encoding="utf-8") == text


def test_fmeca_csv_rows_in_worksheet_order(gated):
    rows = list(csv.DictReader(io.StringIO(fmeca_csv(gated.decision.fmeca))))
    assert len(rows) == 6
    assert rows[0]["class_name"] == "ant" and rows[0]["priority_worst"] == "High"
    assert [int(r["rank"]) for r in rows] == list(range(1, 7))
    for r in rows:
        assert int(r["RPN_worst"]) == int(r["S"]) * int(r["O_worst"]) * int(r["D"])


def _open(page, html_path, problems, requests):
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(html_path.as_uri())
    page.wait_for_load_state("load")


# what sticks out of the viewport or out of its own box (a table cut off)
_OVERFLOW_JS = """() => {
  const vw = document.documentElement.clientWidth;
  const bad = [];
  if (document.documentElement.scrollWidth > vw) bad.push('document ' + document.documentElement.scrollWidth);
  for (const el of document.querySelectorAll('table, figure, svg, p, h1, h2, pre, code')) {
    const r = el.getBoundingClientRect();
    if (r.width && (r.right > vw + 1 || r.left < -1)) bad.push(el.tagName + '#' + (el.id || '') + ' ' + r.right);
    if (el.tagName === 'TABLE' && el.scrollWidth > el.clientWidth + 1) bad.push('table#' + el.id + ' scrolls');
  }
  return bad;
}"""  # noqa: E501 - embedded JavaScript source


# the rule ids and failure modes that wrap onto a second line (each is one word to a reader)
_WRAPPED_IDS_JS = """() => [...document.querySelectorAll('td.rule-id code, td.mode')]
  .filter(e => { const line = parseFloat(getComputedStyle(e).lineHeight) || 20;
                 return e.getBoundingClientRect().height > 1.5 * line; })
  .map(e => e.textContent)"""


@pytest.mark.parametrize("width", [1280, 390])
def test_html_renders_in_headless_chromium(gated, require_binary, artifacts_dir, width):
    chromium = require_binary("chromium")
    from playwright.sync_api import sync_playwright

    html_path = gated.files["report.html"]
    html = html_path.read_text(encoding="utf-8")
    assert "http://" not in html.replace("http://www.w3.org", "") and "https://" not in html  # self-contained
    problems: list[str] = []
    requests: list[str] = []
    shot = artifacts_dir / f"gate-report-{width}px.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": 900})
            _open(page, html_path, problems, requests)
            assert page.inner_text("#verdict") == "ERROR"
            # decision and rule table come first
            order = page.evaluate("[...document.querySelectorAll('section, header')].map(e => e.id)")
            assert order[:3] == ["decision", "rules", "headline"]
            assert page.locator("#rules tbody tr").count() == len(RULES)
            # the worst class at its worst moment, named: class, iteration, seed
            worst = gated.decision.headline.worst_moment
            assert worst is not None
            text = page.inner_text("#worst-moment")
            assert f"class {worst.class_name!r}" in text and f"iteration {worst.iteration}" in text
            assert "seed 3" in text
            body = page.evaluate("document.body.clientWidth")
            for fig in ("fig-heatmap", "fig-acc-mica", "fig-boxplots", "fig-stability-gap", "fig-raa-raf"):
                svg = page.locator(f"#{fig} svg")
                assert svg.count() == 1, fig
                box = svg.bounding_box()
                assert box and box["width"] >= 0.85 * body - 60 and box["height"] > 100, fig  # full width
            # the heatmap: one image of classes × points, task boundaries, the worst moment marked
            assert page.locator("#fig-heatmap [id^='class-heatmap']").count() == 1
            assert page.locator("#fig-heatmap [id^='task-boundary']").count() == 2
            assert page.locator("#fig-heatmap [id^='worst-moment']").count() == 1
            # the stability-gap figure marks the minimum after learned of each old task
            assert page.locator("#fig-stability-gap [id^='min-acc-']").count() == 2
            assert page.locator("#fig-stability-gap [id^='task-curve-']").count() == 3
            assert page.locator("#fmeca-table tbody tr").count() == 6
            assert page.locator("#criticality-matrix tbody tr").count() == 10
            assert page.evaluate(_OVERFLOW_JS) == []  # nothing cut off, no sideways scrolling
            assert page.locator("td.rule-id").count() == len(RULES)
            assert page.evaluate(_WRAPPED_IDS_JS) == []  # no rule id broken (worst-clas|s)
            if width < 500:  # narrow: table rows reflow into labelled cards
                cell = page.locator("#fmeca-table tbody tr").first.locator("td").nth(4)
                assert (
                    page.evaluate("e => getComputedStyle(e, '::before').content", cell.element_handle())
                    == '"final error"'
                )
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    assert problems == []
    assert all(u.startswith(("file://", "data:")) for u in requests), requests
    assert shot.stat().st_size > 10_000


def test_pdf_beside_the_html_has_the_header_on_its_first_page(gated, require_binary, artifacts_dir):
    require_binary("chromium")
    pdftotext = require_binary("pdftotext")
    import shutil
    import subprocess

    from clgate.reports import write_pdf

    pdf = write_pdf(gated.files["report.html"])
    assert pdf == gated.files["report.html"].with_suffix(".pdf") and pdf.read_bytes().startswith(b"%PDF")
    shutil.copy(pdf, artifacts_dir / "gate-report.pdf")

    def page_text(n: int) -> str:
        out = subprocess.run(
            [pdftotext, "-layout", "-f", str(n), "-l", str(n), str(pdf), "-"],
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout

    d = gated.decision
    html = gated.files["report.html"].read_text(encoding="utf-8")
    date = html.split('<span id="date">')[1].split("<")[0]
    model = html.split('<strong id="model">')[1].split("<")[0]
    header = f"{model} · {d.verdict} · policy {d.policy_name} v{d.policy_version} · {date}"
    pages = int(
        subprocess.run(
            [pdftotext.replace("pdftotext", "pdfinfo"), str(pdf)], capture_output=True, text=True, check=True
        )
        .stdout.split("Pages:")[1]
        .split()[0]
    )
    assert pages >= 2
    for n in (1, pages):  # the header is the first line of every page: model, verdict, policy, date
        first_line = next(x for x in page_text(n).splitlines() if x.strip())
        assert " ".join(first_line.split()) == header, (n, first_line)
    everything = " ".join(" ".join(page_text(i).split()) for i in range(1, pages + 1))
    assert '"test": "reports"' in everything  # the provenance is printed, not collapsed
    # no near-empty last page (a lone hash line): the provenance table and its JSON stay together
    last = [x for x in page_text(pages).splitlines()[1:] if x.strip() and not x.strip().startswith("page ")]
    assert len(last) > 5 and "Provenance" in " ".join(last), last


def test_pdf_without_chromium_says_so(gated, monkeypatch):
    from clgate.reports import PdfError, write_pdf

    monkeypatch.setenv("CLGATE_CHROMIUM", "/nonexistent/chromium")
    with pytest.raises(PdfError, match="no Chromium found"):
        write_pdf(gated.files["report.html"])
    assert not gated.files["report.html"].with_suffix(".pdf").exists()


def test_user_text_is_escaped_in_html_and_markdown(tmp_path, build_log, policy_of):
    names = ["<script>alert(1)</script>", "a|b", "**bold** [x](javascript:1)"]
    log = build_log(
        [(1, True, [0.9, 0.5, None]), (2, True, [0.2, 0.8, 0.9])], tasks=[[0, 1], [2]], names=names
    )
    res = gate_logs(
        [log], policy_of({"metric": "acc", "floor": 0.1}, fmeca={"default_severity": 5}), out_dir=tmp_path
    )
    html = res.files["report.html"].read_text(encoding="utf-8")
    md = res.files["report.md"].read_text(encoding="utf-8")
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>" not in md and "&lt;script&gt;" in md
    assert "a\\|b" in md and "[x](javascript" not in md and "\\*\\*bold\\*\\*" in md
    header = next(x for x in md.splitlines() if x.startswith("| # | class"))
    for line in md.splitlines():  # every FMECA row keeps its column count: no name breaks the table
        if line.startswith("| ") and line.split("|")[1].strip().isdigit():
            assert line.replace("\\|", "").count("|") == header.count("|")


def test_markdown_links_the_full_report_and_lists_top_n(gated):
    d = gated.decision
    md = render_markdown(d, report_url="https://ci.example/job/1/report.html", max_fmeca_rows=4)
    assert (
        "[Full report (figures, FMECA worksheet, provenance)](<https://ci.example/job/1/report.html>)" in md
    )
    fmeca_rows = [x for x in md.splitlines() if x.startswith("| ") and x.split("|")[1].strip().isdigit()]
    assert len(fmeca_rows) == 4 and "2 more failure mode(s) in the [full report]" in md
    assert (
        len(
            [
                x
                for x in render_markdown(d).splitlines()
                if x.startswith("| ") and x.split("|")[1].strip().isdigit()
            ]
        )
        == 6
    )  # default top 10: all six
    assert " %" in fmeca_rows[0]  # error rates as percentages
    hostile = render_markdown(d, report_url="https://x/a b>c")
    assert "(<https://x/a%20b%3Ec>)" in hostile


def test_html_for_invalid_inputs_still_renders(tmp_path, good_log, build_log, policy_of):
    other = build_log([(1, True, [0.9, 0.9])], tasks=[[0, 1]], names=["x", "y"])
    res = gate_logs([good_log(), other], policy_of({"metric": "acc", "floor": 0.5}), out_dir=tmp_path)
    html = res.files["report.html"].read_text(encoding="utf-8")
    assert res.verdict == "ERROR" and "No metrics: the inputs were invalid" in html and "<svg" not in html


def test_a_pass_with_high_modes_explains_itself_and_unrated_modes_are_shown(
    tmp_path, forgetful_log, policy_of
):
    rated = gate_logs(
        [forgetful_log()],
        policy_of({"metric": "acc", "floor": 0.5}, fmeca={"severity": {"ant": 9}}),
        out_dir=tmp_path / "rated",
    )
    assert rated.verdict == "PASS"
    md = rated.files["report.md"].read_text(encoding="utf-8")
    html = rated.files["report.html"].read_text(encoding="utf-8")
    assert "PASS with 1 High-priority failure mode(s) ('ant'" in md and "no FMECA rule" in md
    assert 'id="fmeca-note"' in html and "5 of 6 failure mode(s) are unrated" in md
    assert md.count("| unrated |") == 5 and "5 unrated" in md
    assert html.count('class="ap-unrated"') == 10  # final and worst priority of 5 rows
    rows = list(csv.DictReader(io.StringIO(rated.files["fmeca.csv"].read_text(encoding="utf-8"))))
    assert [r["priority_worst"] for r in rows] == ["High"] + ["unrated"] * 5 and rows[1]["S"] == rows[1][
        "RPN_worst"
    ] == ""
    quiet = gate_logs(
        [forgetful_log()],
        policy_of({"metric": "acc", "floor": 0.5}, fmeca={"default_severity": 2}),
        out_dir=tmp_path / "quiet",
    )
    assert 'id="fmeca-note"' not in quiet.files["report.html"].read_text(encoding="utf-8")


def test_the_fmeca_note_names_the_rule_that_only_warns(tmp_path, forgetful_log, policy_of):
    policy = policy_of(
        {"metric": "acc", "floor": 0.5},
        {"fmeca": "priority", "fail_at": "High", "severity": "warn", "id": "no-high"},
        fmeca={"default_severity": 9},
    )
    res = gate_logs([forgetful_log()], policy, out_dir=tmp_path)
    assert res.verdict == "WARN"
    md = res.files["report.md"].read_text(encoding="utf-8")
    assert "WARN with" in md and "'no-high' found them but only warn" in md
