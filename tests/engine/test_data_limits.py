"""``clgate run``/``evaluate`` apply the service's data limits (``CLGATE_MAX_NPZ_BYTES``,
``CLGATE_MAX_SAMPLES``) before loading: an NPZ bomb is refused in a second with the limit named and the
memory bounded; a flag lifts or changes them for a user's own large data."""

from __future__ import annotations

import io
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np
import pytest

from clgate.engine.data import MAX_DATA_BYTES, MAX_SAMPLES, DataLimits, data_limits, load_data
from clgate.engine.errors import DataError
from tests.fixtures.bombs import npz_bomb


def _spec(tmp_path, data_name: str) -> str:
    spec = {
        "mode": "retrain",
        "data": {"kind": "npz", "path": data_name},
        "scenario": {"n_tasks": 2},
        "model": {"arch": "mlp", "hidden": 8},
        "training": {"iterations": 2, "batch_size": 4},
        "evaluation": {"eval_every": 2},
        "seeds": [0],
        "device": "cpu",
    }
    path = tmp_path / "job.json"
    path.write_text(json.dumps(spec))
    return str(path)


def _small_npz() -> bytes:
    rng = np.random.default_rng(0)
    buf = io.BytesIO()
    np.savez(
        buf,
        x_train=rng.random((40, 4), dtype="float32"),
        y_train=np.arange(40) % 4,
        x_test=rng.random((20, 4), dtype="float32"),
        y_test=np.arange(20) % 4,
    )
    return buf.getvalue()


def _clgate(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("CLGATE_")}
    return subprocess.run(
        [sys.executable, "-m", "clgate", *args],
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_defaults_are_the_services():
    from clgate.store.settings import Settings

    s = Settings()
    assert (s.max_npz_bytes, s.max_samples) == (MAX_DATA_BYTES, MAX_SAMPLES)


def test_an_npz_bomb_through_the_cli_is_refused_fast_with_bounded_memory(tmp_path):
    (tmp_path / "bomb.npz").write_bytes(npz_bomb())  # 384 MB of zeros in a few hundred KB
    started = time.monotonic()
    r = _clgate("run", _spec(tmp_path, "bomb.npz"), "--out", str(tmp_path / "out"), "-q")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "CLGATE_MAX_SAMPLES" in r.stderr and "6000000 samples" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert time.monotonic() - started < 120
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    assert peak_kib < 1_500_000, f"peak memory {peak_kib} KiB"  # the 384 MB array was never allocated
    r = _clgate("run", _spec(tmp_path, "bomb.npz"), "-q", env={"CLGATE_MAX_NPZ_BYTES": str(1 << 20)})
    assert r.returncode == 2 and "CLGATE_MAX_NPZ_BYTES" in r.stderr, r.stderr


def test_a_flag_lifts_or_changes_the_limits_for_ones_own_data(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from clgate.cli import app

    (tmp_path / "small.npz").write_bytes(_small_npz())
    spec = _spec(tmp_path, "small.npz")
    monkeypatch.setenv("CLGATE_MAX_SAMPLES", "10")
    runner = CliRunner()
    refused = runner.invoke(app, ["run", spec, "--out", str(tmp_path / "a"), "-q"])
    assert refused.exit_code == 2 and "CLGATE_MAX_SAMPLES" in refused.output, refused.output
    raised = runner.invoke(app, ["run", spec, "--max-samples", "100", "--out", str(tmp_path / "b"), "-q"])
    assert raised.exit_code == 0, raised.output
    lifted = runner.invoke(app, ["run", spec, "--no-limits", "--out", str(tmp_path / "c"), "-q"])
    assert lifted.exit_code == 0, lifted.output
    monkeypatch.setenv("CLGATE_MAX_SAMPLES", "many")
    bad = runner.invoke(app, ["run", spec, "--out", str(tmp_path / "d"), "-q"])
    assert bad.exit_code == 2 and "CLGATE_MAX_SAMPLES: must be a positive integer" in bad.output


def test_load_data_judges_within_the_limits_in_force(tmp_path):
    (tmp_path / "small.npz").write_bytes(_small_npz())
    spec = {"kind": "npz", "path": "small.npz"}
    assert load_data(spec, tmp_path).x_train.shape[0] == 40  # no limits in force: loaded
    with data_limits(DataLimits(max_samples=39)), pytest.raises(DataError, match=r"x_train has 40 samples"):
        load_data(spec, tmp_path)
    with data_limits(DataLimits(max_bytes=100)), pytest.raises(DataError, match="CLGATE_MAX_NPZ_BYTES"):
        load_data(spec, tmp_path)
