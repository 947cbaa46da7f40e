"""Benchmark: ``clgate metrics`` and ``clgate gate`` on a long log, against a bare ``json.load``.

    .venv/bin/python benchmarks/bench_long_logs.py            # 50,000 points × 1,000 classes (258 MB)
    .venv/bin/python benchmarks/bench_long_logs.py --quick    # 5,000 points × 200 classes

It writes a synthetic log (10 tasks, every seen class evaluated at every point, 50 samples a class),
its ``.npz`` encoding and a policy into a temporary folder, then runs each of these in its own
process and reads that process's peak RSS and wall time (``os.wait4``):

- ``json.load`` of the JSON file (the reference),
- ``clgate metrics LOG.json --json``, ``clgate gate --log LOG.json --policy P --out DIR``,
- reading the ``.npz`` arrays with ``numpy.load`` (the reference for the binary encoding),
- ``clgate metrics LOG.npz --json``, ``clgate gate --log LOG.npz --policy P --out DIR``,

and prints the ratios measured in this one run (with ``--repeat N``, the commands run round robin N
times and each keeps its fastest run; ``cpu s`` is user + system time, steadier than wall time on a
shared machine). Goals (issue 25): the JSON commands within 1.5× the memory and time of ``json.load``;
the ``.npz`` metrics within 2× reading its arrays.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
CLGATE = str(Path(sys.executable).with_name("clgate"))
NPZ_LOAD = "import numpy as np, sys; z = np.load(sys.argv[1], allow_pickle=False); [z[k] for k in z.files]"
POLICY = """\
format: clgate.policy/v1
name: long-log
version: "1"
rules:
  - {id: average, metric: acc, floor: 0.3}
  - {id: worst-class, metric: mica, floor: 0.1}
  - {id: worst-class-bound, metric: mica, bound: wilson95, floor: 0.05}
  - {id: every-class, classes: "*", at: final, floor: 0.05}
"""


def write_synthetic(path: Path, n_points: int, n_classes: int, n_tasks: int = 10, seed: int = 0) -> None:
    """A valid log with counts, written point by point (the generator never holds the whole log)."""
    rng = np.random.default_rng(seed)
    tasks = rng.permutation(n_classes).reshape(n_tasks, -1)
    class_task = np.empty(n_classes, dtype=int)
    for k, t in enumerate(tasks):
        class_task[t] = k
    point_task = np.minimum(np.arange(n_points) * n_tasks // n_points, n_tasks - 1)
    ends = np.r_[point_task[1:] != point_task[:-1], True]
    with path.open("w") as f:
        f.write(f'{{"format":"clgate.evaluation-log/v1","tasks":{json.dumps(tasks.tolist())},"points":[')
        for i in range(n_points):
            seen = class_task <= point_task[i]
            total = np.where(seen, 50, 0)
            correct = np.where(seen, rng.integers(10, 51, n_classes), 0)
            sep, end = "," if i else "", "true" if ends[i] else "false"
            c, t = ",".join(map(str, correct.tolist())), ",".join(map(str, total.tolist()))
            f.write(
                f'{sep}{{"iteration":{10 * (i + 1)},"task":{point_task[i] + 1},"task_end":{end},'
                f'"correct":[{c}],"total":[{t}]}}'
            )
        f.write(f'],"meta":{{"seed":{seed},"synthetic":true}}}}')


def measure(argv: list[str]) -> tuple[float, float, float]:
    """(wall seconds, peak RSS in MiB, CPU seconds: user + system) of one process running ``argv``;
    stdout discarded."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, cwd=ROOT)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):  # 1: the gate said FAIL, which is a result
        raise SystemExit(f"{argv}: exit {proc.returncode}")
    return elapsed, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime  # ru_maxrss: KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=50_000)
    parser.add_argument("--classes", type=int, default=1_000)
    parser.add_argument("--quick", action="store_true", help="5,000 points × 200 classes")
    parser.add_argument("--repeat", type=int, default=1, help="best of N runs of each command")
    parser.add_argument(
        "--workdir", type=Path, help="keep the files here and reuse a log.json already there (same size)"
    )
    args = parser.parse_args()
    if args.quick:
        args.points, args.classes = 5_000, 200

    with tempfile.TemporaryDirectory(prefix="clgate-bench-") as tmp:
        d = args.workdir or Path(tmp)
        d.mkdir(parents=True, exist_ok=True)
        log, npz, policy = d / "log.json", d / "log.npz", d / "policy.yaml"
        if args.workdir is None or not log.exists():
            write_synthetic(log, args.points, args.classes)
        policy.write_text(POLICY)
        code = (
            "import sys; from clgate.logfile import read_log, write_log; "
            "write_log(read_log(sys.argv[1]), sys.argv[2], format='npz')"
        )
        subprocess.run([PYTHON, "-c", code, str(log), str(npz)], check=True)
        runs = {
            "json.load": [PYTHON, "-c", "import json, sys; json.load(open(sys.argv[1], 'rb'))", str(log)],
            "clgate metrics (json)": [CLGATE, "metrics", str(log), "--json"],
            "clgate gate --out (json)": [
                CLGATE,
                "gate",
                "--log",
                str(log),
                "--policy",
                str(policy),
                "--out",
                str(d / "out-json"),
            ],
            "numpy.load arrays (npz)": [
                PYTHON,
                "-c",
                NPZ_LOAD,
                str(npz),
            ],
            "clgate metrics (npz)": [CLGATE, "metrics", str(npz), "--json"],
            "clgate gate --out (npz)": [
                CLGATE,
                "gate",
                "--log",
                str(npz),
                "--policy",
                str(policy),
                "--out",
                str(d / "out-npz"),
            ],
        }
        # round robin: a burst of load on a shared machine hits every command, not one command's runs
        rounds = [{name: measure(argv) for name, argv in runs.items()} for _ in range(args.repeat)]
        results = {name: min((r[name] for r in rounds), key=lambda r: r[0]) for name in runs}
        size_json, size_npz = log.stat().st_size, npz.stat().st_size

    print(
        f"clgate long-log benchmark — python {platform.python_version()}, numpy {np.__version__}, "
        f"{os.cpu_count()} CPU(s) visible"
    )
    print(
        f"log: {args.points} points × {args.classes} classes, {size_json / 1e6:.0f} MB of JSON, "
        f"{size_npz / 1e6:.1f} MB as .npz; best of {args.repeat}"
    )
    print(f"{'':28} {'time s':>8} {'cpu s':>6} {'peak MiB':>9} {'× time':>7} {'× memory':>9} {'× cpu':>6}")
    for name, (t, m, cpu) in results.items():
        ref = results["numpy.load arrays (npz)" if "npz" in name else "json.load"]
        print(
            f"{name:28} {t:8.2f} {cpu:6.2f} {m:9.0f} {t / ref[0]:7.2f} {m / ref[1]:9.2f} {cpu / ref[2]:6.2f}"
        )
    goals = [
        ("clgate metrics (json)", "json.load", 1.5),
        ("clgate gate --out (json)", "json.load", 1.5),
        ("clgate metrics (npz)", "numpy.load arrays (npz)", 2.0),
    ]
    for name, ref, limit in goals:
        (t, m, _), (rt, rm, _) = results[name], results[ref]
        met = t <= limit * rt and m <= limit * rm
        print(f"goal {name} ≤ {limit}× {ref} in time and memory: {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
