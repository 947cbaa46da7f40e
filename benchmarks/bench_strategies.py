"""Strategies on one budget: finetune, ER, GDumb, WA, iCaRL and DER++ on split digits, worst case included.

One scenario — scikit-learn's digits in 5 tasks of 2 classes, the example spec
``examples/jobs/digits-er.yaml`` (MLP 2×400, SGD lr 0.05, batch 16, 5 epochs per task, a point every 5
updates) trained with the papers' recipe, SGD with momentum 0.9 and weight decay 5·10⁻⁴ (Zhao et al.
2020 and PyCIL train WA so; ``--recipe plain`` keeps the example spec's plain SGD) — and one budget for
every memory method: ``mem_size`` 200 samples; ER, iCaRL and DER++ add a replay batch of 16 beside each
new batch of 16, WA (as its paper) trains each task on one shuffled set of the task's samples and its
exemplars, GDumb retrains from scratch on its memory alone. Each strategy runs the same seeds (default
0 … 4; one job, one log per seed). The table gives, at the end of the last task, the mean and spread over
seeds of ACC (average accuracy over tasks), MICA (the worst class's accuracy), the run's WAMICA (worst
class, weighted over the run), the memory held (``buffer_bytes``), the mul-adds trained (``ops_train``,
summed over tasks) and, from the final model's head, ``γ = mean ‖w_old‖ / mean ‖w_new‖`` with the last
task's classes as the new ones: the factor WA would apply to that model (WA's premise is γ < 1: the new
classes' weight vectors are the larger ones; after WA's own alignment it is 1).

Then it checks the orderings the papers report (finetune below every memory method; DER++ above ER,
Buzzega et al. 2020; WA above plain replay, Zhao et al. 2020; WA above GDumb, Konaté et al. 2023, whose
DER is Yan et al.'s expandable representation, not ``derpp``; iCaRL above finetune, Rebuffi et al. 2017)
and says which hold here. Wall time ≈ 2–3 minutes on 2
cores. Run: ``.venv/bin/python benchmarks/bench_strategies.py`` (``--seeds 0,1 --epochs 2`` for a
quicker look).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from safetensors.torch import load_file

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from clgate.documents import load_job, load_log  # noqa: E402 - after the sys.path insert above
from clgate.engine import run_job  # noqa: E402 - after the sys.path insert above
from clgate.metrics import compute_metrics  # noqa: E402 - after the sys.path insert above

STRATEGIES: dict[str, dict[str, object]] = {
    "finetune": {},
    "er": {"mem_size": 200, "replay_batch_size": 16},
    "gdumb": {"mem_size": 200},
    "wa": {"mem_size": 200},
    "icarl": {"mem_size": 200, "replay_batch_size": 16},
    "derpp": {"mem_size": 200, "replay_batch_size": 16},
}
METRICS = ("acc", "mica", "wamica")
RECIPES: dict[str, dict[str, float]] = {
    "papers": {"training.momentum": 0.9, "training.weight_decay": 5e-4},
    "plain": {},  # the example spec's SGD: no momentum, no weight decay
}


def run(
    name: str, params: dict[str, object], seeds: list[int], epochs: int, out: Path, recipe: str
) -> dict[str, list[float]]:
    spec = load_job(REPO / "examples/jobs/digits-er.yaml").with_overrides(
        {
            "strategy": {"name": name, **params},
            "seeds": seeds,
            "training.epochs": epochs,
            "training.save_final": True,
            "device": "cpu",
            **RECIPES[recipe],
        }
    )
    start = time.perf_counter()
    paths = run_job(spec, out / name)
    wall = time.perf_counter() - start
    rows: dict[str, list[float]] = {m: [] for m in (*METRICS, "buffer_bytes", "ops_train", "gamma")}
    for path in paths:
        log = load_log(path)
        values = compute_metrics(log).metrics
        for m in METRICS:
            v = values[m]
            rows[m].append(float(v[-1] if isinstance(v, list) else v))
        rows["buffer_bytes"].append(float(log.resources[-1].buffer_bytes))
        rows["ops_train"].append(float(sum(r.ops_train for r in log.resources)))
        head = load_file(str(Path(path).parent / f"model-seed{log.meta['seed']}.safetensors"))["net.5.weight"]
        norms = head.norm(dim=1)
        old = [c for task in log.tasks[:-1] for c in task]
        rows["gamma"].append(float(norms[old].mean() / norms[log.tasks[-1]].mean()))
    rows["wall_s"] = [wall]
    return rows


def mean(values: list[float]) -> float:
    return statistics.fmean(values)


def cell(values: list[float]) -> str:
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean(values):.2f} ± {spread:.2f}"


def check(results: dict[str, dict[str, list[float]]]) -> list[str]:
    """The papers' orderings, on mean final ACC and MICA and on WAMICA."""
    claims = [
        ("finetune is below every memory method", "finetune", ["er", "gdumb", "wa", "icarl", "derpp"]),
        ("DER++ is above ER (Buzzega et al. 2020)", "er", ["derpp"]),
        ("WA is above plain replay (Zhao et al. 2020)", "er", ["wa"]),
        ("WA is above GDumb (Konaté et al. 2023)", "gdumb", ["wa"]),
        ("iCaRL is above finetune (Rebuffi et al. 2017)", "finetune", ["icarl"]),
    ]
    lines = []
    for text, below, above in claims:
        for m in METRICS:
            low = mean(results[below][m])
            fails = [a for a in above if not mean(results[a][m]) > low]
            verdict = "holds" if not fails else "does NOT hold for " + ", ".join(fails)
            lines.append(f"- {text}, on {m}: {verdict}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated seeds")
    parser.add_argument("--epochs", type=int, default=5, help="epochs per task")
    parser.add_argument(
        "--recipe",
        choices=tuple(RECIPES),
        default="papers",
        help="papers: SGD with momentum 0.9 and weight decay 5e-4; plain: the example spec's SGD",
    )
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    results: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, params in STRATEGIES.items():
            results[name] = run(name, params, seeds, args.epochs, Path(tmp), args.recipe)
    recipe = ", ".join(f"{k}={v}" for k, v in RECIPES[args.recipe].items()) or "plain SGD"
    print(
        f"split digits, 5 tasks, MLP 2×400, {args.epochs} epochs, seeds {args.seeds}, memory 200 samples, "
        f"recipe {args.recipe} ({recipe})"
    )
    print()
    print("| strategy | ACC | MICA | WAMICA | buffer_bytes | ops_train ÷ finetune | γ, final head | wall s |")
    print("|---|---|---|---|---|---|---|---|")
    ops0 = mean(results["finetune"]["ops_train"])
    for name, r in results.items():
        print(
            f"| {name} | {cell(r['acc'])} | {cell(r['mica'])} | {cell(r['wamica'])} | "
            f"{int(mean(r['buffer_bytes']))} | {mean(r['ops_train']) / ops0:.2f} | {cell(r['gamma'])} | "
            f"{r['wall_s'][0]:.0f} |"
        )
    print()
    print("\n".join(check(results)))


if __name__ == "__main__":
    main()
