"""Benchmark: every metric on a large synthetic log, against the time to load it.

    .venv/bin/python benchmarks/bench_metrics.py [--tasks 50] [--classes-per-task 10] [--points 20000]

A synthetic log of K tasks × classes per task, with P evaluation points spread evenly over the tasks,
per-class counts at every point (unseen classes not evaluated), resources, and metrics with the default
windows (10, 100). It prints, measured in this one run (best of ``--repeat``):

- parse + validate: ``EvaluationLog.model_validate_json`` on the JSON bytes,
- LogArrays: building the tensors from the validated log,
- metrics: ``compute_metrics`` on those tensors (every id, evidence and class statistics),

and the ratios. Goal (issue 2): all metrics well under a second on a 2-core machine, and less time than
loading the log.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clgate.metrics import LogArrays, compute_metrics
from clgate.schemas import EvaluationLog


def synthetic_log(n_tasks: int, per_task: int, n_points: int, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    C = n_tasks * per_task
    tasks = rng.permutation(C).reshape(n_tasks, per_task)
    class_task = np.empty(C, dtype=int)
    for k, t in enumerate(tasks):
        class_task[t] = k
    point_task = np.minimum(np.arange(n_points) * n_tasks // n_points, n_tasks - 1)
    total = np.where(class_task[None, :] <= point_task[:, None], rng.integers(20, 60, size=(n_points, C)), 0)
    skill = rng.uniform(0.3, 0.95, size=(n_points, C))
    correct = rng.binomial(total, skill)
    ends = np.r_[point_task[1:] != point_task[:-1], True]
    points = [
        {
            "iteration": 10 * (i + 1),
            "task": int(point_task[i]) + 1,
            "task_end": bool(ends[i]),
            "correct": correct[i].tolist(),
            "total": total[i].tolist(),
        }
        for i in range(n_points)
    ]
    resources = [
        {
            "task": k + 1,
            "model_params": 1_000_000 + 1000 * k,
            "buffer_bytes": 200_000 * k,
            "train_bytes": 3_000_000,
            "ops_train": 1.2e12,
            "ops_pass": 1.2e10,
        }
        for k in range(n_tasks)
    ]
    doc = {
        "format": "clgate.evaluation-log/v1",
        "tasks": tasks.tolist(),
        "points": points,
        "resources": resources,
        "meta": {"synthetic": True, "seed": seed},
    }
    return json.dumps(doc).encode()


def best_of(repeat: int, fn):
    best, value = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - start)
    return best, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=50)
    parser.add_argument("--classes-per-task", type=int, default=10)
    parser.add_argument("--points", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    raw = synthetic_log(args.tasks, args.classes_per_task, args.points)
    t_load, log = best_of(args.repeat, lambda: EvaluationLog.model_validate_json(raw))
    t_arrays, arrays = best_of(args.repeat, lambda: LogArrays.from_log(log))
    t_metrics, result = best_of(args.repeat, lambda: compute_metrics(arrays))
    t_to_micro, micro = best_of(args.repeat, lambda: arrays.with_task_accuracy("micro"))  # re-pool the counts
    t_micro, _ = best_of(args.repeat, lambda: compute_metrics(micro, task_accuracy="micro"))
    t_dump, _ = best_of(args.repeat, lambda: result.model_dump_json())
    loading = t_load + t_arrays

    C = args.tasks * args.classes_per_task
    print(
        f"clgate metrics benchmark — python {platform.python_version()}, numpy {np.__version__}, "
        f"{os.cpu_count()} CPU(s) visible"
    )
    print(
        f"log: K = {args.tasks} tasks × {args.classes_per_task} classes (C = {C}), P = {args.points} points, "
        f"{len(raw) / 1e6:.1f} MB of JSON; best of {args.repeat}"
    )
    print(f"  parse + validate (EvaluationLog)   {t_load:8.3f} s")
    print(f"  LogArrays construction             {t_arrays:8.3f} s")
    print(f"  all metrics (compute_metrics)      {t_metrics:8.3f} s   ({len(result.metrics)} ids, macro)")
    print(f"  LogArrays → micro task accuracy    {t_to_micro:8.3f} s")
    print(f"  all metrics, micro task accuracy   {t_micro:8.3f} s")
    print(f"  MetricsResult → JSON               {t_dump:8.3f} s")
    print(f"ratio metrics / parse+validate       {t_metrics / t_load:8.3f}")
    print(f"ratio metrics / (parse+validate+LogArrays) {t_metrics / loading:8.3f}")
    ok = t_metrics < 1.0 and t_metrics < loading
    print("goal (metrics < 1 s and < loading):", "met" if ok else "NOT met")


if __name__ == "__main__":
    main()
