"""WA on split digits, one component off at a time: what each part of the method does here.

The scenario and budget of ``benchmarks/bench_strategies.py`` (the example spec
``examples/jobs/digits-er.yaml``: 5 tasks of 2 classes, MLP 2×400, SGD lr 0.05, batch 16, 5 epochs per
task, with the papers' momentum 0.9 and weight decay 5·10⁻⁴; 200 exemplars; ``er`` replays a batch of 16
beside each batch, ``wa`` trains each task on its new samples and the exemplars shuffled together, as
the paper), seeds 0 … 4. Variants of ``wa``:

- ``wa``: the method (herding exemplars, (1 − λ)·CE + λ·KD, weight clipping, the head's bias held at 0,
  weight aligning);
- ``wa, no aligning``: the same training, the head left as trained (γ is measured, not applied);
- ``wa, bias kept``: ``bias: keep`` (the head's bias trained, as PyCIL), and the same without aligning;
- ``wa, no clipping``: ``clip: false``;
- ``wa, no KD``: λ = 0 (cross-entropy on the task's new samples and the exemplars only);
- ``wa, no KD, no aligning``: herding exemplars trained with the new samples, nothing else;
- ``er``: plain replay, for reference.

For each: ACC, MICA and WAMICA at the end (mean ± spread over seeds), the γ = mean ‖w_old‖ / mean ‖w_new‖
of the head after each task's last update (before aligning; the mean over seeds, tasks 2 … 5), the gap
between the new and the old classes' mean head bias there, and the final model's accuracy on the old
classes and on the last task's classes (the share of their test samples predicted right). The variants
are subclasses of ``wa`` defined here, registered in this process and in the engine's child (started
through a launcher that imports this file first). Wall time ≈ 2 minutes on 2 cores. Run:
``.venv/bin/python benchmarks/bench_wa.py`` (``--memory 50``: fewer exemplars, a stronger imbalance;
``--recipe plain``: the example spec's SGD without momentum or weight decay; ``--set training.lr=0.5``:
any job spec override on top, repeatable; ``--epochs``, ``--seeds``;
``--arch cnn``: the built-in small CNN instead of the MLP; ``--variants "wa; er"``: only the variants
named, separated by ``;``). The defaults are the scenario above.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402 - after the sys.path insert above

from clgate.documents import load_job, load_log  # noqa: E402 - after the sys.path insert above
from clgate.engine import run_job  # noqa: E402 - after the sys.path insert above
from clgate.engine import strategies as st  # noqa: E402 - after the sys.path insert above
from clgate.engine.samples import Samples  # noqa: E402 - after the sys.path insert above
from clgate.engine.trusted import ChildLaunch  # noqa: E402 - after the sys.path insert above
from clgate.metrics import compute_metrics  # noqa: E402 - after the sys.path insert above

GAMMAS_ENV = "BENCH_WA_GAMMAS"  # where the child appends the γ it measured, one JSON line per task


class _Recording(st.WA):
    """``wa`` writing γ and the bias gap after each task's last update (before aligning) to the file
    named by ``$BENCH_WA_GAMMAS``."""

    def _record(self, k: int, data: Samples) -> None:
        old = [] if self.old is None else self.old.tolist()
        new = sorted(c for c in data.labels.unique().tolist() if c not in set(old))
        if old and new and (path := os.environ.get(GAMMAS_ENV)):
            gamma = float(st.head_norms(self.head, old).mean() / st.head_norms(self.head, new).mean())
            rows = st.class_rows(self.head)
            bias = {c: 0.0 if b.bias is None else float(b.bias[r].detach()) for c, (b, r) in rows.items()}
            gap = statistics.fmean(bias[c] for c in new) - statistics.fmean(bias[c] for c in old)
            with open(path, "a") as f:
                f.write(json.dumps({"task": k + 1, "gamma": gamma, "bias_gap": gap}) + "\n")

    def end_training(self, k: int, data: Samples) -> None:
        self._record(k, data)
        super().end_training(k, data)


class WAFull(_Recording):
    name = "bench-wa"


class WANoAlign(_Recording):
    name = "bench-wa-no-align"

    def end_training(self, k: int, data: Samples) -> None:
        self._record(k, data)
        self.gammas.append(1.0)
        self.herd(data)


class WANoKD(_Recording):
    name = "bench-wa-no-kd"

    def kd_weight(self) -> float:
        return 0.0


class WAReplayOnly(WANoAlign):
    """No KD and no aligning: herding exemplars in the task's set (and ``clip`` as given)."""

    name = "bench-wa-replay-only"

    def kd_weight(self) -> float:
        return 0.0


def register() -> None:
    """Make the variants known to :func:`clgate.engine.strategies.get_strategy` in this process."""
    for cls in (WAFull, WANoAlign, WANoKD, WAReplayOnly):
        st.BUILTIN_STRATEGIES[cls.name] = cls


def launcher(launch: ChildLaunch) -> subprocess.Popen[bytes]:
    """The engine's child, with this file's variants registered before it starts."""
    boot = (
        "import runpy, sys; sys.path.insert(0, sys.argv[1]); del sys.argv[1]; "
        "import bench_wa; bench_wa.register(); runpy.run_module('clgate.engine.child', run_name='__main__')"
    )
    # local_launcher's child (``python -m clgate.engine.child …``) with the boot code in front
    argv = [sys.executable, "-c", boot, str(Path(__file__).parent), *launch.argv()[3:]]
    argv += ["--parent-pid", str(os.getpid())]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and Path(p).is_dir())
    return subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, start_new_session=True
    )


VARIANTS: dict[str, dict[str, object]] = {
    "wa": {"name": WAFull.name},
    "wa, no aligning": {"name": WANoAlign.name},
    "wa, bias kept": {"name": WAFull.name, "bias": "keep"},
    "wa, bias kept, no aligning": {"name": WANoAlign.name, "bias": "keep"},
    "wa, no clipping": {"name": WAFull.name, "clip": False},
    "wa, no KD": {"name": WANoKD.name},
    "wa, no KD, no aligning": {"name": WAReplayOnly.name},
    "er": {"name": "er"},
}
RECIPES: dict[str, dict[str, float]] = {
    "papers": {"training.momentum": 0.9, "training.weight_decay": 5e-4},
    "plain": {},  # the example spec's SGD: no momentum, no weight decay
}


def run(
    strategy: dict[str, object],
    seeds: list[int],
    epochs: int,
    out: Path,
    *,
    arch: str,
    memory: int,
    recipe: str,
    overrides: dict[str, Any],
) -> dict[str, Any]:
    spec = load_job(REPO / "examples/jobs/digits-er.yaml").with_overrides(
        {
            "model.arch": arch,
            "strategy": {
                **strategy,
                "mem_size": memory,
                **({"replay_batch_size": 16} if strategy["name"] == "er" else {}),
            },
            "seeds": seeds,
            "training.epochs": epochs,
            "device": "cpu",
            **RECIPES[recipe],
            **overrides,
        }
    )
    gammas_file = out / "gammas.jsonl"
    os.environ[GAMMAS_ENV] = str(gammas_file)
    paths = run_job(spec, out, launcher=launcher)
    rows: dict[str, Any] = {"acc": [], "mica": [], "wamica": [], "old": [], "last": []}
    for path in paths:
        log = load_log(path)
        values = compute_metrics(log).metrics
        for m in ("acc", "mica", "wamica"):
            v = values[m]
            rows[m].append(float(v[-1] if isinstance(v, list) else v))
        end = log.points[-1]
        correct, total = torch.tensor(end.correct), torch.tensor(end.total)
        old = [c for task in log.tasks[:-1] for c in task]
        rows["old"].append(float(correct[old].sum() / total[old].sum()))
        rows["last"].append(float(correct[log.tasks[-1]].sum() / total[log.tasks[-1]].sum()))
    by_task: dict[int, list[dict[str, float]]] = {}
    if gammas_file.exists():
        for line in gammas_file.read_text().splitlines():
            record = json.loads(line)
            by_task.setdefault(record["task"], []).append(record)
    for key in ("gamma", "bias_gap"):
        rows[key] = [statistics.fmean(r[key] for r in by_task[t]) for t in sorted(by_task)]
    return rows


def cell(values: list[float]) -> str:
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.2f} ± {spread:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated seeds")
    parser.add_argument("--epochs", type=int, default=5, help="epochs per task")
    parser.add_argument("--arch", choices=("mlp", "cnn"), default="mlp", help="model.arch of the job")
    parser.add_argument("--memory", type=int, default=200, help="exemplars (strategy.mem_size)")
    parser.add_argument(
        "--recipe",
        choices=tuple(RECIPES),
        default="papers",
        help="papers: SGD with momentum 0.9 and weight decay 5e-4; plain: the example spec's SGD",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a job spec override on top of the recipe (YAML value), e.g. training.lr=0.5; repeatable",
    )
    parser.add_argument(
        "--variants",
        default="all",
        help="the variants to run, separated by ';' (names as in the table), or 'all'",
    )
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    chosen = list(VARIANTS) if args.variants == "all" else [v.strip() for v in args.variants.split(";")]
    unknown = [v for v in chosen if v not in VARIANTS]
    if unknown:
        parser.error(f"--variants: unknown {unknown}; known: {'; '.join(VARIANTS)}")
    if args.memory < 10:
        parser.error("--memory: at least one exemplar per class (10)")
    overrides: dict[str, Any] = {}
    for item in args.set:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            parser.error(f"--set {item!r}: expected KEY=VALUE, e.g. training.lr=0.5")
        overrides[key.strip()] = yaml.safe_load(value)
    register()
    model = "MLP 2×400" if args.arch == "mlp" else "cnn"
    print(
        f"split digits, 5 tasks, {model}, {args.epochs} epochs, seeds {args.seeds}, {args.memory} exemplars, "
        f"recipe {args.recipe}" + "".join(f", {k}={v}" for k, v in overrides.items())
    )
    print()
    print(
        "| variant | ACC | MICA | WAMICA | old classes, final | last task, final "
        "| γ before aligning, tasks 2–5 | bias new − old, tasks 2–5 |"
    )
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for i, label in enumerate(chosen):
            r = run(
                VARIANTS[label],
                seeds,
                args.epochs,
                Path(tmp) / str(i),
                arch=args.arch,
                memory=args.memory,
                recipe=args.recipe,
                overrides=overrides,
            )
            gammas = ", ".join(f"{g:.2f}" for g in r["gamma"]) or "—"
            gaps = ", ".join(f"{g:+.2f}" for g in r["bias_gap"]) or "—"
            print(
                f"| {label} | {cell(r['acc'])} | {cell(r['mica'])} | {cell(r['wamica'])} | "
                f"{cell(r['old'])} | {cell(r['last'])} | {gammas} | {gaps} |"
            )


if __name__ == "__main__":
    main()
