"""Data at full size: a uint8 data set whose float32 copy alone would exceed the memory limit trains
and evaluates within it (the limit is set with ``resource.setrlimit(RLIMIT_AS)`` in a subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from clgate.documents import load_log

resource = pytest.importorskip("resource")

CHILD = textwrap.dedent(
    """
    import json, resource, sys
    from pathlib import Path
    from clgate.engine import run_job
    from clgate.schemas.job import JobSpec

    npz, out, budget = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    def spec(data, tasks, name):
        return JobSpec.model_validate({
            "data": data, "scenario": {"n_tasks": tasks}, "model": {"arch": "mlp", "hidden": 16},
            "training": {"batch_size": 32, "iterations": 3},
            "evaluation": {"eval_every": 2, "subsample_per_task": 50}, "device": "cpu", "cpu_threads": 1,
        })
    # warm up: every lazily imported module and allocator pool in place before the limit
    run_job(spec({"kind": "synthetic", "n_classes": 2, "n_features": 3072, "train_per_class": 40,
                  "test_per_class": 10}, 2, "warm"), out / "warm")
    vm = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + budget, resource.getrlimit(resource.RLIMIT_AS)[1]))
    [path] = run_job(spec({"kind": "npz", "path": npz}, 10, "big"), out / "big")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"log": str(path), "limit": vm + budget, "peak_rss": peak}))
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc are Linux's")
def test_uint8_set_larger_than_its_float_budget_trains_and_evaluates(tmp_path):

    rng = np.random.default_rng(0)
    n_train, n_test, shape = 30_000, 5_000, (3, 32, 32)
    y_train = np.repeat(np.arange(10), n_train // 10)
    y_test = np.repeat(np.arange(10), n_test // 10)
    x_train = rng.integers(0, 256, size=(n_train, *shape), dtype=np.uint8)
    x_test = rng.integers(0, 256, size=(n_test, *shape), dtype=np.uint8)
    np.savez(tmp_path / "big.npz", x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    float_copy = 4 * (x_train.size + x_test.size)  # what a float32 copy of the inputs alone needs
    budget = 300 << 20
    assert float_copy > budget + (100 << 20)
    del x_train, x_test
    env = dict(os.environ, MALLOC_ARENA_MAX="1", OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "big.npz"), str(tmp_path / "out"), str(budget)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    log = load_log(result["log"])
    assert not log.partial and log.n_tasks == 10
    assert sum(log.points[-1].total) == 10 * 50  # the evaluation subsample of every task


def test_uncompressed_npz_is_memory_mapped_and_reads_like_the_compressed_one(tmp_path):
    import mmap

    from clgate.engine.data import load_npz

    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(40, 3, 4, 4), dtype=np.uint8)
    y = np.repeat(np.arange(4), 10)
    np.savez(tmp_path / "plain.npz", x_train=x, y_train=y, x_test=x[:8], y_test=y[::5])
    np.savez_compressed(tmp_path / "packed.npz", x_train=x, y_train=y, x_test=x[:8], y_test=y[::5])
    plain, packed = load_npz(tmp_path / "plain.npz"), load_npz(tmp_path / "packed.npz")

    def file_backed(a: np.ndarray) -> bool:
        while a is not None and not isinstance(a, mmap.mmap):
            a = a.base
        return isinstance(a, mmap.mmap)

    assert file_backed(plain.x_train) and not file_backed(packed.x_train)
    assert np.array_equal(plain.x_train, packed.x_train) and plain.digest() == packed.digest()
