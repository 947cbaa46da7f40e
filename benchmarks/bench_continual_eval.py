"""Continual evaluation and training overhead of the engine, as ratios measured in one run.

1. Cost of one evaluation point through the trust split (the child predicts, one frame crosses a pipe,
   the trusted side checks and counts) ÷ a bare ``torch.inference_mode()`` forward pass over the same
   samples, same batch size (goal ≤ 1.15), beside the in-process evaluator the runner used before the
   split. Two sizes: digits (360 samples, 10 classes) and 100 classes × 10 000 held-out samples of 784
   features, both with the 2×400 MLP.
2. A training iteration in the engine ÷ a plain hand-written PyTorch loop on the same model and
   batches (goal ≤ 1.1). The engine's per-iteration cost is the slope of ``run_job`` wall time
   between two iteration counts (setup cancels out); evaluation off, strategy finetune.
3. Digits, 5 tasks, ``er``, ``eval_every=1``: wall time end to end, in process and through
   ``clgate run`` (goal: under a minute).

Timings interleave the compared variants and keep the median (evaluation) or the minimum (training)
of several rounds, because the machine may be shared. Run: ``.venv/bin/python
benchmarks/bench_continual_eval.py``.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from clgate.documents import load_job, load_log  # noqa: E402 - after the sys.path insert above
from clgate.engine import run_job  # noqa: E402 - after the sys.path insert above
from clgate.engine.evaluator import ContinualEvaluator, select_heldout  # noqa: E402 - after the sys.path insert
from clgate.engine.models import build_model  # noqa: E402 - after the sys.path insert above
from clgate.engine.protocol import (  # noqa: E402 - after the sys.path insert above
    FrameReader,
    check_predictions,
    encode_frame,
    prediction_dtype,
)
from clgate.engine.training import HeldoutPredictor  # noqa: E402 - after the sys.path insert above
from clgate.engine.trusted import HeldoutCounter  # noqa: E402 - after the sys.path insert above
from clgate.schemas.job import JobSpec  # noqa: E402 - after the sys.path insert above

ROUNDS = 5


def median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def bench_evaluation(n_samples: int, shape: tuple[int, ...], n_classes: int, label: str) -> float:
    """One evaluation point through the trust split — the child predicts every staged held-out sample
    (resident on the device), the predictions cross a real pipe as one frame, the trusted side reads,
    checks and counts them — against a bare forward over the same samples and against the in-process
    evaluator (the runner's path before the split). Measured at the last task (every sample counted)
    and at the first (the in-process evaluator forwards only that task's samples; the child always
    predicts all of them, so that which samples are asked for tells it no task)."""
    torch.manual_seed(0)
    x = torch.randn(n_samples, *shape)
    y = torch.randint(0, n_classes, (n_samples,))
    per_task = n_classes // 5
    tasks = [list(range(k * per_task, (k + 1) * per_task)) for k in range(5)]
    device = torch.device("cpu")
    model = build_model("mlp", shape, n_classes).train()
    seen = torch.ones(n_classes, dtype=torch.bool)
    ev = ContinualEvaluator(x, y, tasks=tasks, n_classes=n_classes, device=device, batch_size=2048)
    bs = ev.batch_size
    selection = select_heldout(y.numpy(), tasks=tasks, n_classes=n_classes)
    rank = np.random.default_rng(0).permutation(len(selection.indices))
    staged = x.numpy()[selection.indices[rank]]
    labels = y.numpy()[selection.indices[rank]]
    dtype = prediction_dtype(n_classes)
    predictor = HeldoutPredictor(staged, device=device, dtype=dtype, batch_size=bs)
    counter = HeldoutCounter(labels, rank, ends=selection.ends, totals=selection.totals)
    reader = FrameReader(dtype, expected_n=len(labels))
    read_fd, write_fd = os.pipe()

    def predict(inp: torch.Tensor) -> torch.Tensor:
        return model(inp).masked_fill(~seen, float("-inf"))

    def split_point(seen_tasks: int) -> None:
        preds = predictor.predict(predict, model)  # the child
        os.write(write_fd, encode_frame({"type": "point", "task": seen_tasks}, preds))
        while (frame := reader.next_frame()) is None:  # the trusted side
            reader.feed(os.read(read_fd, 1 << 20))
        check_predictions(frame[1], n_classes)
        counter.count(frame[1], seen_tasks=seen_tasks)

    def bare_forward() -> None:
        with torch.inference_mode():
            for s in range(0, n_samples, bs):
                model(predictor.x[s : s + bs])

    variants = {
        "split, last task": lambda: split_point(5),
        "in-process, last task": lambda: ev.evaluate(predict, model, seen_tasks=5),
        "split, first task": lambda: split_point(1),
        "in-process, first task": lambda: ev.evaluate(predict, model, seen_tasks=1),
        "bare forward": bare_forward,
    }
    repeat = 100 if n_samples < 1000 else 4
    for fn in variants.values():
        fn()  # warm-up
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(ROUNDS):  # interleaved rounds, the median of each
        for name, fn in variants.items():
            times[name].append(median_time(fn, repeat))
    t = {name: statistics.median(v) for name, v in times.items()}
    bare = t["bare forward"]
    ratio = t["split, last task"] / bare
    print(f"  {label}: bare forward {bare * 1e3:.3f} ms")
    for name in ("split, last task", "in-process, last task", "split, first task", "in-process, first task"):
        print(f"    {name}: {t[name] * 1e3:.3f} ms = {t[name] / bare:.3f} × bare forward")
    print(f"    → split ÷ bare forward at the last task: {ratio:.3f} (goal ≤ 1.15)")
    os.close(read_fd)
    os.close(write_fd)
    return ratio


def digits_spec(**changes) -> JobSpec:
    spec = load_job(REPO / "examples" / "jobs" / "digits-er.yaml")
    return spec.with_overrides({"device": "cpu", **changes})


def bench_training() -> float:
    from clgate.engine.data import load_digits

    lo, hi = 40, 340
    n_tasks = 5

    def engine(iters: int) -> float:
        spec = digits_spec(
            **{"strategy.name": "finetune", "training.iterations": iters, "evaluation.eval_every": None}
        )
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            run_job(spec, Path(tmp))
            return time.perf_counter() - t

    tr = digits_spec().training  # the same optimizer settings as the engine run
    ds = load_digits()
    x_all = torch.from_numpy(ds.x_train)
    y_all = torch.from_numpy(ds.y_train)

    def plain(iters: int) -> float:
        """The loop a person would write: shuffled batches of 16, SGD (the spec's lr and momentum),
        cross-entropy, 5 tasks."""
        torch.manual_seed(0)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # as the engine (cpu_threads: 1)
        model = build_model("mlp", (1, 8, 8), 10)
        g = torch.Generator().manual_seed(0)
        t = time.perf_counter()
        for k in range(n_tasks):
            idx_task = ((y_all == 2 * k) | (y_all == 2 * k + 1)).nonzero().flatten()
            x, y = x_all[idx_task], y_all[idx_task]
            opt = torch.optim.SGD(model.parameters(), lr=tr.lr, momentum=tr.momentum)
            n = len(y)
            steps = -(-n // 16)
            for it in range(iters):
                if it % steps == 0:
                    perm = torch.randperm(n, generator=g)
                b = perm[(it % steps) * 16 : (it % steps + 1) * 16]
                loss = F.cross_entropy(model(x[b]), y[b])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
        elapsed = time.perf_counter() - t
        torch.set_num_threads(threads)
        return elapsed

    engine(lo), plain(lo)  # warm-up
    # Interleaved; the minimum over rounds is the least disturbed by other processes on the machine.
    e_lo, e_hi, p_lo, p_hi = [], [], [], []
    for _ in range(6):
        e_lo.append(engine(lo))
        p_lo.append(plain(lo))
        e_hi.append(engine(hi))
        p_hi.append(plain(hi))
    e = (min(e_hi) - min(e_lo)) / ((hi - lo) * n_tasks)
    p = (min(p_hi) - min(p_lo)) / ((hi - lo) * n_tasks)
    ratio = e / p
    print(
        f"  engine iteration {e * 1e6:.1f} µs, plain loop iteration {p * 1e6:.1f} µs → ratio "
        f"{ratio:.3f} (goal ≤ 1.1)"
    )
    return ratio


def bench_digits_er() -> tuple[float, float]:
    spec = digits_spec(**{"evaluation.eval_every": 1})
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        (path,) = run_job(spec, Path(tmp))
        library = time.perf_counter() - t

        n_points = len(load_log(path).points)
        clgate = REPO / ".venv" / "bin" / "clgate"
        cmd = [str(clgate)] if clgate.exists() else [sys.executable, "-m", "clgate.cli"]
        t = time.perf_counter()
        subprocess.run(
            [
                *cmd,
                "run",
                str(REPO / "examples" / "jobs" / "digits-er.yaml"),
                "evaluation.eval_every=1",
                "--device",
                "cpu",
                "--out",
                tmp,
                "-q",
            ],
            check=True,
            capture_output=True,
        )
        cli = time.perf_counter() - t
    print(
        f"  digits, 5 tasks, er, eval_every=1: {n_points} evaluation points; run_job {library:.2f} s, "
        f"`clgate run` {cli:.2f} s end to end (goal < 60 s)"
    )
    return library, cli


def main() -> None:
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads available; engine uses "
        "cpu_threads=1"
    )
    print(
        "1. evaluation point (trust split, in-process evaluator) ÷ bare inference_mode forward (batch 2048)"
    )
    torch.set_num_threads(1)
    bench_evaluation(360, (1, 8, 8), 10, "digits size, 360 × 64, 10 classes")
    bench_evaluation(10_000, (784,), 100, "100 classes, 10 000 held-out samples × 784")
    print("2. engine training iteration ÷ plain PyTorch loop (MLP 2×400, batch 16, SGD as in digits-er.yaml)")
    bench_training()
    print("3. end to end")
    bench_digits_er()


if __name__ == "__main__":
    main()
