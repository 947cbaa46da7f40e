"""``clgate metrics`` and ``clgate gate`` on the ``.npz`` encoding of a log, as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from clgate.cli import app
from clgate.documents import load_log
from clgate.logfile import write_log

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "logs" / "spec-example.json"
POLICY = REPO / "examples" / "policies" / "regression-only.yaml"
runner = CliRunner()


def _npz(tmp_path: Path) -> Path:
    return write_log(load_log(EXAMPLE), tmp_path / "log.npz", format="npz")[0]


def test_metrics_of_the_npz_equal_those_of_the_json(tmp_path):
    outputs = []
    for path in (EXAMPLE, _npz(tmp_path)):
        result = runner.invoke(app, ["metrics", str(path), "--json"])
        assert result.exit_code == 0, result.output
        outputs.append(json.loads(result.stdout))
    assert outputs[0] == outputs[1]


def test_gate_on_the_npz_decides_as_on_the_json_with_the_same_log_hash(tmp_path):
    npz = _npz(tmp_path)
    decisions = []
    for name, path in (("json", EXAMPLE), ("npz", npz)):
        out = tmp_path / name
        result = runner.invoke(
            app,
            ["gate", "--log", str(path), "--baseline", str(path), "--policy", str(POLICY), "--out", str(out)],
        )
        assert result.exit_code in (0, 1), result.output
        decisions.append(json.loads((out / "decision.json").read_text()))
    assert decisions[0]["hashes"] == decisions[1]["hashes"]
    assert decisions[0]["verdict"] == decisions[1]["verdict"]
    assert decisions[0]["rules"] == decisions[1]["rules"]


def test_a_malformed_npz_exits_2_naming_the_member(tmp_path):
    npz = _npz(tmp_path)
    with np.load(npz, allow_pickle=False) as z:
        members = {k: z[k] for k in z.files}
    members["total"] = members["total"].astype(float)
    np.savez(tmp_path / "bad.npz", **members)
    result = runner.invoke(app, ["metrics", str(tmp_path / "bad.npz")])
    assert result.exit_code == 2
    assert "total: dtype float64 is not allowed" in result.output
