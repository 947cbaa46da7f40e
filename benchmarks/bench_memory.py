"""Replay memories in stored dtype: bytes held and process peak, uint8 memory ÷ float32 memory, and the
evaluation log unchanged — ratios measured in one run.

1. **Held and peak.** An ER memory of 10 000 samples filled from 20 000 uint8 images of 3×32×32 (a
   CIFAR-sized stream) and a GDumb memory of the same size, each variant in a fresh process: the memory
   as it is now (uint8, converted per replay batch) and as it was (float32 model input, forced here by
   setting the memory's dtype). Printed: ``buffer_bytes``, how much filling raised the process's peak
   resident memory (``ru_maxrss`` after filling − before, the data already loaded), the peak itself
   (torch's own ~300 MiB included), and the ratio of bytes held.
2. **Same log.** ``er`` and ``gdumb`` jobs on split digits stored as uint8 (``.npz``) and on the same
   images stored as float32 ``k / 255`` — the same model input, so the old float32 memory's contents —
   give identical evaluation points; only ``buffer_bytes`` differs (uint8 held: a quarter of the inputs).

Run: ``.venv/bin/python benchmarks/bench_memory.py``; about a minute on 2 cores.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from clgate.documents import load_log  # noqa: E402 - after the sys.path insert above
from clgate.engine import run_job  # noqa: E402 - after the sys.path insert above
from clgate.engine.samples import Samples, iterate_batches  # noqa: E402 - after the sys.path insert above
from clgate.engine.strategies import StrategyContext, create_strategy  # noqa: E402 - after the sys.path insert
from clgate.schemas.job import JobSpec  # noqa: E402 - after the sys.path insert above

N, SHAPE, MEM = 20_000, (3, 32, 32), 10_000


def fill(strategy: str, held: str) -> dict[str, float]:
    """In this process: fill one memory from the uint8 stream; its bytes and this process's peak."""
    rng = np.random.default_rng(0)
    data = Samples(rng.integers(0, 256, size=(N, *SHAPE), dtype=np.uint8), rng.integers(0, 10, size=N))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ctx = StrategyContext(
        model=torch.nn.Linear(1, 10), n_classes=10, device=torch.device("cpu"), seed=0, batch_size=256
    )
    s, _ = create_strategy(strategy, {"mem_size": MEM}, ctx)
    mem = s.memory  # type: ignore[attr-defined]
    mem.expect(data)
    if held == "float32":
        mem.dtype = torch.float32  # the memory as it was: model input
    if strategy == "er":
        for xb, yb in iterate_batches(data, torch.arange(N).split(256), ctx.device):
            s.after_step(xb, yb, first_pass=True)
    else:
        s.before_task(0, data)
        s.task_data(0, data)  # GDumb trains on a copy of its memory
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"buffer_bytes": s.buffer_bytes(), "peak_mib": peak / 1024, "base_mib": before / 1024}


def held_and_peak() -> None:
    print(f"1. memory of {MEM} samples from {N} uint8 images {SHAPE}, each variant in a fresh process")
    print("| strategy | held | buffer_bytes | peak growth by filling, MiB | peak, MiB | bytes ratio |")
    print("|---|---|---|---|---|---|")
    for strategy in ("er", "gdumb"):
        got = {}
        for held in ("float32", "uint8"):
            out = subprocess.run(
                [sys.executable, __file__, "--fill", strategy, held],
                capture_output=True,
                text=True,
                check=True,
            )
            got[held] = json.loads(out.stdout)
        for held in ("float32", "uint8"):
            r = got[held]
            growth = r["peak_mib"] - r["base_mib"]
            ratio = r["buffer_bytes"] / got["float32"]["buffer_bytes"]
            peak = f"{r['peak_mib']:.0f}"
            cells = [strategy, held, r["buffer_bytes"], f"{growth:.0f}", peak, f"{ratio:.3f}"]
            print("| " + " | ".join(map(str, cells)) + " |")


def same_log() -> None:
    from sklearn.datasets import load_digits

    digits = load_digits()
    x8 = np.round(digits.images / 16 * 255).astype(np.uint8)[:, None]
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(y))
    test, train = order[:360], order[360:]
    print("\n2. digits as uint8 vs the same images as float32 k/255 (the old memory's contents)")
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in ("uint8", "float32"):
            x = x8 if dtype == "uint8" else x8.astype(np.float32) / np.float32(255.0)
            arrays = {"x_train": x[train], "y_train": y[train], "x_test": x[test], "y_test": y[test]}
            np.savez(Path(tmp) / f"{dtype}.npz", **arrays)
        for strategy in ("er", "gdumb"):
            logs = {}
            for dtype in ("uint8", "float32"):
                spec = JobSpec.model_validate(
                    {
                        "data": {"kind": "npz", "path": str(Path(tmp) / f"{dtype}.npz")},
                        "scenario": {"n_tasks": 5},
                        "model": {"arch": "mlp", "hidden": 100},
                        "strategy": {"name": strategy, "mem_size": 200},
                        "training": {"lr": 0.05, "batch_size": 16, "epochs": 2},
                        "evaluation": {"eval_every": 5},
                        "seeds": [0],
                        "device": "cpu",
                    }
                )
                (path,) = run_job(spec, Path(tmp) / f"{strategy}-{dtype}")
                logs[dtype] = load_log(path)
            a, b = logs["uint8"], logs["float32"]
            same = [p.model_dump() for p in a.points] == [p.model_dump() for p in b.points]
            rest = all(
                {**ra.model_dump(), "buffer_bytes": 0} == {**rb.model_dump(), "buffer_bytes": 0}
                for ra, rb in zip(a.resources, b.resources, strict=True)
            )
            ratio = a.resources[-1].buffer_bytes / b.resources[-1].buffer_bytes
            print(
                f"- {strategy}: {len(a.points)} points identical: {same}; other resources identical: {rest}; "
                f"buffer_bytes {a.resources[-1].buffer_bytes} vs {b.resources[-1].buffer_bytes} "
                f"(ratio {ratio:.3f})"
            )


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--fill":
        print(json.dumps(fill(sys.argv[2], sys.argv[3])))
    else:
        held_and_peak()
        same_log()
