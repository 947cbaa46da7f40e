"""Continual evaluation and training overhead of the engine, as ratios measured in one run.

1. Evaluation cost per evaluation point ÷ a bare ``torch.inference_mode()`` forward pass over the same
   tensors, same batch size (goal ≤ 1.2). Two sizes: the digits test set (360 samples) and a
   Split-MNIST-sized set (10 000 samples of 784 features), both with the 2×400 MLP.
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

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from clgate.documents import load_job, load_log  # noqa: E402 - after the sys.path insert above
from clgate.engine import run_job  # noqa: E402 - after the sys.path insert above
from clgate.engine.evaluator import ContinualEvaluator  # noqa: E402 - after the sys.path insert above
from clgate.engine.models import build_model  # noqa: E402 - after the sys.path insert above
from clgate.schemas.job import JobSpec  # noqa: E402 - after the sys.path insert above

ROUNDS = 5


def median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def bench_evaluation(n_samples: int, shape: tuple[int, ...], label: str) -> float:
    torch.manual_seed(0)
    n_classes = 10
    x = torch.randn(n_samples, *shape)
    y = torch.randint(0, n_classes, (n_samples,))
    tasks = [[2 * k, 2 * k + 1] for k in range(5)]
    device = torch.device("cpu")
    model = build_model("mlp", shape, n_classes).train()
    seen = torch.ones(n_classes, dtype=torch.bool)
    ev = ContinualEvaluator(x, y, tasks=tasks, n_classes=n_classes, device=device, batch_size=2048)
    resident_x = ev.x  # the same tensors, in the evaluator's order
    bs = ev.batch_size

    def predict(inp: torch.Tensor) -> torch.Tensor:
        return model(inp).masked_fill(~seen, float("-inf"))

    def engine_point() -> None:
        ev.evaluate(predict, model, seen_tasks=5)

    def bare_forward() -> None:
        with torch.inference_mode():
            for s in range(0, n_samples, bs):
                model(resident_x[s : s + bs])

    repeat = 100 if n_samples < 1000 else 4
    engine_point(), bare_forward()  # warm-up
    e_times, b_times = [], []
    for _ in range(ROUNDS):
        e_times.append(median_time(engine_point, repeat))
        b_times.append(median_time(bare_forward, repeat))
    e, b = statistics.median(e_times), statistics.median(b_times)
    ratio = e / b
    print(
        f"  {label}: evaluation point {e * 1e3:.3f} ms, bare forward {b * 1e3:.3f} ms → ratio "
        f"{ratio:.3f} (goal ≤ 1.2)"
    )
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
        in_process = time.perf_counter() - t

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
        f"  digits, 5 tasks, er, eval_every=1: {n_points} evaluation points; run_job {in_process:.2f} s, "
        f"`clgate run` {cli:.2f} s end to end (goal < 60 s)"
    )
    return in_process, cli


def main() -> None:
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads available; engine uses "
        "cpu_threads=1"
    )
    print("1. evaluation point ÷ bare inference_mode forward (same tensors, batch 2048)")
    torch.set_num_threads(1)
    bench_evaluation(360, (1, 8, 8), "digits test set, 360 × 64")
    bench_evaluation(10_000, (784,), "Split-MNIST size, 10 000 × 784")
    print("2. engine training iteration ÷ plain PyTorch loop (MLP 2×400, batch 16, SGD as in digits-er.yaml)")
    bench_training()
    print("3. end to end")
    bench_digits_er()


if __name__ == "__main__":
    main()
