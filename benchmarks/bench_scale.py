"""Data at full size: memory, load time, training throughput, evaluation share, recorder overhead.

    .venv/bin/python benchmarks/bench_scale.py                 # 100 classes × 600 3×32×32 uint8 (~185 MB)
    .venv/bin/python benchmarks/bench_scale.py --per-class 60 --images 400   # a quick look

Prints figures and ratios (not part of the test suite; no timing is asserted anywhere):

- peak RSS of a whole ``clgate run`` subprocess on the NPZ (goal ≤ 900 MB at full size) and on a PNG
  image folder, with their load times;
- training samples/s of the engine against a plain ``DataLoader`` loop on the same data, model,
  batch size and number of updates (goal ≥ 0.9×);
- the evaluation share of wall time with the default evaluation settings;
- the recorder's overhead in a plain loop against the same loop without it.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def make_npz(path: Path, n_classes: int, per_class: int, test_per_class: int, seed: int = 0) -> int:
    rng = np.random.default_rng(seed)
    centres = rng.integers(40, 216, size=(n_classes, 3, 1, 1))

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = np.repeat(np.arange(n_classes), n)
        x = np.empty((len(y), 3, 32, 32), dtype=np.uint8)
        for c in range(n_classes):  # one class at a time: this process stays small
            noise = rng.normal(0, 40, size=(n, 3, 32, 32)).astype(np.float32)
            x[c * n : (c + 1) * n] = np.clip(centres[c] + noise, 0, 255).astype(np.uint8)
        return x, y

    x_train, y_train = draw(per_class)
    x_test, y_test = draw(test_per_class)
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return path.stat().st_size


def make_folder(root: Path, n_classes: int, per_class: int, size: int = 64) -> None:
    from PIL import Image

    rng = np.random.default_rng(1)
    for split, n in (("train", per_class), ("test", max(1, per_class // 5))):
        for c in range(n_classes):
            d = root / split / f"c{c:03d}"
            d.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                a = rng.integers(0, 256, size=(size, size, 3), dtype=np.uint8)
                Image.fromarray(a).save(d / f"{i}.png")


def job(data: dict, *, n_tasks: int, eval_every: int | None, subsample: int | None, iterations: int) -> dict:
    return {
        "data": data,
        "scenario": {"n_tasks": n_tasks},
        "model": {"arch": "cnn"},
        "training": {"batch_size": 64, "iterations": iterations, "lr": 0.01},
        "evaluation": {"eval_every": eval_every, "subsample_per_task": subsample},
        "cpu_threads": 1,
    }


def run_cli(spec: dict, work: Path, name: str) -> tuple[float, int]:
    """Wall time and peak RSS (bytes, ``VmHWM``: the exec'd process's own, not the fork's) of ``clgate
    run``."""
    path = work / f"{name}.json"
    path.write_text(json.dumps(spec))
    code = (
        "import resource, sys, time; t = time.perf_counter(); from clgate.cli import main; "
        "sys.argv = ['clgate', 'run', sys.argv[1], '--out', sys.argv[2], '-q']\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "hwm = next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:'))\n"
        "print(time.perf_counter() - t, hwm * 1024)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(path), str(work / name)], capture_output=True, text=True, check=False
    )
    if out.returncode:
        raise SystemExit(out.stderr[-2000:])
    wall, rss = out.stdout.split()[-2:]
    return float(wall), int(rss)


def plain_loop(
    data: dict, *, n_tasks: int, iterations: int, recorder_every: int | None = None, workers: int = 0
) -> float:
    """Seconds for a plain DataLoader loop of the same model and updates (optionally with the recorder):
    a map-style data set of one sample per item, ``shuffle=True``, the default collate."""
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, Subset

    from clgate import Recorder
    from clgate.engine.data import load_data, model_input
    from clgate.engine.models import build_model
    from clgate.engine.scenario import build_tasks

    torch.set_num_threads(1)
    ds = load_data(data)
    tasks = build_tasks(ds.n_classes, n_tasks=n_tasks)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    model = build_model("cnn", ds.input_shape, ds.n_classes).to(device)
    recorder = None
    if recorder_every is not None:
        recorder = Recorder(
            ds.x_test[:],
            ds.y_test,
            tasks=tasks,
            eval_every=recorder_every,
            subsample_per_task=200,
            device=device,
            transform=model_input,
        )

    class Items(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return len(ds.y_train)

        def __getitem__(self, i: int):
            return torch.from_numpy(np.asarray(ds.x_train[i])), int(ds.y_train[i])

    clock = time.perf_counter if workers else time.process_time
    start = clock()
    for classes in tasks:
        idx = np.flatnonzero(np.isin(ds.y_train, classes)).tolist()
        loader = DataLoader(Subset(Items(), idx), batch_size=64, shuffle=True, num_workers=workers)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        done = 0
        while done < iterations:
            for xb, yb in loader:
                xb, yb = model_input(xb.to(device)), yb.to(device)
                loss = F.cross_entropy(model(xb), yb)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                if recorder is not None:
                    recorder.step(model, samples=len(yb))
                done += 1
                if done == iterations:
                    break
        if recorder is not None:
            recorder.task_end(model)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return clock() - start


def engine_loop(data: dict, *, n_tasks: int, iterations: int, work: Path, wall: bool = True) -> float:
    """Seconds of ``run_job`` (in this process) for the same updates, evaluating only a 50-sample
    subsample per task at task ends (``wall``: wall time, else this process's CPU time)."""
    from clgate.engine import run_job
    from clgate.schemas.job import JobSpec

    spec = JobSpec.model_validate(
        job(data, n_tasks=n_tasks, eval_every=None, subsample=50, iterations=iterations) | {"device": "auto"}
    )
    clock = time.perf_counter if wall else time.process_time
    start = clock()
    run_job(spec, work / f"engine-{iterations}")
    return clock() - start


def training_ratio(
    data: dict, *, n_tasks: int, iterations: int, work: Path, workers: int = 0, repeats: int = 5
) -> tuple[float, float, float]:
    """Training samples/s of the engine and of the plain loop, and their ratio: medians of ``repeats``
    alternating runs in this process. Without decoding workers both are timed in CPU time of this
    process (less sensitive to the other work of a shared machine), with workers in wall time. The
    engine's fixed costs (data digest, evaluator, cost counting, task-end evaluations) are taken out
    with a run of one update per task."""
    updates = n_tasks * iterations
    wall = workers > 0

    def engine() -> float:
        full = engine_loop(data, n_tasks=n_tasks, iterations=iterations, work=work, wall=wall)
        one = engine_loop(data, n_tasks=n_tasks, iterations=1, work=work, wall=wall)
        return max(1e-9, full - one) * updates / max(1, updates - n_tasks)

    def plain() -> float:
        return plain_loop(data, n_tasks=n_tasks, iterations=iterations, workers=workers)

    pairs = []
    for r in range(repeats):  # the order alternates: neither side always runs first
        e, p = (engine(), plain()) if r % 2 == 0 else tuple(reversed((plain(), engine())))
        pairs.append((e, p))
    e_med = float(np.median([e for e, _ in pairs]))
    p_med = float(np.median([p for _, p in pairs]))
    return updates * 64 / e_med, updates * 64 / p_med, float(np.median([p / e for e, p in pairs]))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--per-class", type=int, default=600)
    parser.add_argument(
        "--images", type=int, default=20_000, help="PNG images (64×64) in the folder; 0: skip"
    )
    parser.add_argument("--iterations", type=int, default=50, help="updates per task")
    args = parser.parse_args()
    n_tasks = 10 if args.classes % 10 == 0 else 1
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        npz = work / "set.npz"
        size = make_npz(npz, args.classes, args.per_class, max(1, args.per_class // 6))
        print(f"NPZ: {args.classes} classes × {args.per_class} 3×32×32 uint8, {size / 2**20:.0f} MiB on disk")

        from clgate.engine.data import load_npz

        t = time.perf_counter()
        load_npz(npz).digest()
        print(f"  load + digest: {time.perf_counter() - t:.2f} s")
        data = {"kind": "npz", "path": str(npz)}
        wall_eval, rss = run_cli(
            job(data, n_tasks=n_tasks, eval_every=10, subsample=None, iterations=args.iterations),
            work,
            "eval",
        )
        wall_train, _ = run_cli(
            job(data, n_tasks=n_tasks, eval_every=None, subsample=50, iterations=args.iterations),
            work,
            "train",
        )
        print(
            f"  clgate run peak RSS: {rss / 2**20:.0f} MiB (goal ≤ 900 MiB at full size); wall "
            f"{wall_eval:.1f} s"
        )
        print(
            f"  evaluation share of wall time (eval_every 10, all held-out samples): "
            f"{max(0.0, wall_eval - wall_train) / wall_eval:.0%}"
        )

        engine_sps, plain_sps, ratio = training_ratio(
            data, n_tasks=n_tasks, iterations=args.iterations, work=work
        )
        print(
            f"  training samples/s: engine {engine_sps:.0f}, plain DataLoader loop {plain_sps:.0f} "
            f"→ ratio {ratio:.2f}× (goal ≥ 0.9×)"
        )
        plain = plain_loop(data, n_tasks=n_tasks, iterations=args.iterations)
        with_rec = plain_loop(data, n_tasks=n_tasks, iterations=args.iterations, recorder_every=10)
        print(
            "  recorder (every 10 updates, 200 samples/task) in a plain loop: "
            f"{with_rec / plain:.2f}× the loop's time"
        )

        if args.images:
            folder = work / "images"
            per_class = max(1, args.images // 100)
            make_folder(folder, 100, per_class)
            from clgate.engine.data import load_image_folder
            from clgate.engine.samples import default_workers

            t = time.perf_counter()
            load_image_folder(folder, size=(64, 64)).digest()
            load_s = time.perf_counter() - t
            images = {"kind": "image_folder", "path": str(folder), "size": [64, 64]}
            wall, rss = run_cli(
                job(images, n_tasks=10, eval_every=None, subsample=50, iterations=args.iterations),
                work,
                "folder",
            )
            print(
                f"image folder: 100 classes × {per_class} PNG 64×64: load + digest {load_s:.1f} s, "
                f"clgate run peak RSS {rss / 2**20:.0f} MiB, wall {wall:.1f} s"
            )
            workers = default_workers()
            engine_sps, plain_sps, ratio = training_ratio(
                images, n_tasks=10, iterations=args.iterations, work=work, workers=workers
            )
            print(
                f"  training samples/s ({workers} decoding workers each): engine {engine_sps:.0f}, plain "
                f"DataLoader loop {plain_sps:.0f} → ratio {ratio:.2f}× (goal ≥ 0.9×)"
            )
    print(f"(this process peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB)")


if __name__ == "__main__":
    main()
