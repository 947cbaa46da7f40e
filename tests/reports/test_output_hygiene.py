"""Names from a user's files (policy, rule and class names) cannot inject control characters — ANSI
escapes included — into report.md, fmeca.csv, the step summary or the terminal, and junit.xml stays
valid XML for any name."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clgate.fmt import printable
from clgate.gate import gate_logs
from clgate.reports import fmeca_csv, render_junit, render_markdown

ANSI = "\x1b[31mred\x1b[0m\x07\x9b2J"
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@pytest.fixture(scope="module")
def decision(tmp_path_factory):
    from clgate.policy import parse_policy
    from tests.fixtures.gate import _build_log

    points = [(1, True, [0.9, 0.9, None, None]), (2, True, [0.2, 0.3, 0.8, 0.8])]
    log = _build_log(points, tasks=[[0, 1], [2, 3]], names=[ANSI, "cat\x00", "dog\u202e", "ok"])
    policy = parse_policy(
        {"name": f"rel{ANSI}", "version": "1", "rules": [{"metric": "acc", "floor": 0.99, "id": f"r{ANSI}"}]}
    )
    out = tmp_path_factory.mktemp("out")
    return gate_logs([log], policy, out_dir=out, provenance={}), out


def test_no_control_character_reaches_markdown_csv_or_the_summary(decision):
    result, out = decision
    for name in ("report.md", "fmeca.csv"):
        text = (out / name).read_text(encoding="utf-8")
        assert not CONTROL.search(text.replace("\r\n", "\n")), name
        assert "x1b" in text and "31mred" in text, name  # shown, made visible, not dropped
    summary = render_markdown(result.decision)
    assert not CONTROL.search(summary) and "\u202e" not in summary
    assert not CONTROL.search(fmeca_csv(result.decision.fmeca).replace("\r\n", "\n"))


XML_ANY = st.text(
    alphabet=st.characters(exclude_categories=("Cs",))
    | st.sampled_from("\x00\x1b\x7f\x85\ufffe\uffff\ud800"),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=XML_ANY)
def test_junit_is_valid_xml_for_any_name(decision, name):
    from junitparser import JUnitXml

    d = decision[0].decision
    rules = [r.model_copy(update={"id": name, "message": name}) for r in d.rules]
    xml = render_junit(d.model_copy(update={"policy_name": name, "rules": rules}))
    suites = JUnitXml.fromstring(xml.encode("utf-8"))
    suite = next(iter(suites))
    assert suite.name == f"clgate gate: {printable(name)}"
    assert [c.name for c in suite] == [f"rules[{r.index}] {printable(name)}" for r in rules]


def test_the_terminal_table_shows_names_inert(decision):
    import io

    from clgate.cli.gate_cmd import print_decision

    buf = io.StringIO()
    print_decision(decision[0].decision, file=buf)
    text = buf.getvalue()
    assert "\x1b" not in text and "x1b[31mred" in text
