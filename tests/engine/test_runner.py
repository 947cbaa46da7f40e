"""run_job end to end: forgetting vs replay on digits, determinism, evaluation leaves training alone,
partial logs on cancellation / Ctrl-C, evaluate mode, scenario options, resources."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from clgate.documents import load_log
from clgate.engine import JobCancelled, Progress, run_job
from clgate.engine.errors import EngineInputError
from clgate.engine.models import build_model
from clgate.schemas.evaluation_log import EvaluationLog

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")


def _metrics(log: EvaluationLog) -> dict:
    from clgate.metrics import compute_metrics

    return compute_metrics(log, task_accuracy="macro", windows=(10, 100)).metrics


@pytest.mark.slow
def test_digits_finetune_forgets_er_remembers_joint_is_best(tmp_path, digits_spec, hand_metrics):
    logs = {}
    for name in ("finetune", "er", "joint"):
        spec = digits_spec(**{"strategy.name": name})
        (path,) = run_job(spec, tmp_path / name)
        logs[name] = load_log(path)
    m = {name: _metrics(log) for name, log in logs.items()}
    # The metrics engineer's implementation and a hand computation agree on the task-end metrics.
    for name, log in logs.items():
        by_hand = hand_metrics(log)
        for key in ("acc", "mica", "mica_old"):
            assert m[name][key] == pytest.approx(by_hand[key], abs=1e-12, nan_ok=False) or (
                m[name][key][0] is None and by_hand[key][0] is None
            )
    ft, er, joint = m["finetune"], m["er"], m["joint"]
    # finetune: old classes forgotten almost completely after every later task
    assert max(ft["mica_old"][1:]) <= 0.05
    assert ft["acc"][-1] < 0.3
    # er keeps clearly more
    assert er["acc"][-1] > ft["acc"][-1] + 0.3
    assert er["mica"][-1] > ft["mica"][-1] + 0.3
    assert er["mica_old"][-1] > 0.3
    # joint (cumulative retraining) is the upper bound
    assert joint["acc"][-1] > er["acc"][-1] and joint["acc"][-1] > 0.9
    assert joint["mica"][-1] > er["mica"][-1]
    assert joint["wamica"] > er["wamica"] > ft["wamica"]


def test_same_seed_gives_identical_log_other_seed_differs(tmp_path, synthetic_spec):
    spec = synthetic_spec(**{"strategy.name": "er", "strategy.mem_size": 20})
    (a,) = run_job(spec, tmp_path / "a")
    (b,) = run_job(spec, tmp_path / "b")
    assert a.read_bytes() == b.read_bytes()
    (c,) = run_job(spec.with_overrides({"seeds": [1]}), tmp_path / "c")
    la, lc = json.loads(a.read_text()), json.loads(c.read_text())
    assert la["meta"]["seed"] == 0 and lc["meta"]["seed"] == 1
    assert la["points"] != lc["points"]


@pytest.mark.parametrize(
    "arch,strategy",
    [pytest.param("resnet18-slim", "er", id="resnet-batchnorm-er"), pytest.param("mlp", "lwf", id="mlp-lwf")],
)
def test_evaluating_every_update_does_not_change_what_is_learned(tmp_path, digits_spec, arch, strategy):
    """Final weights (and BatchNorm buffers) with eval_every=1 + a point before the first update
    equal those of a run without intermediate evaluation."""
    base = digits_spec(
        **{
            "model.arch": arch,
            "strategy.name": strategy,
            "scenario.n_tasks": 5,
            "training.iterations": 3,
            "training.momentum": 0.9,
            "training.save_final": True,
        }
    )
    if strategy == "er":
        base = base.with_overrides({"strategy.mem_size": 30})
    on = base.with_overrides({"evaluation.eval_every": 1, "evaluation.before_first_update": True})
    off = base.with_overrides({"evaluation.eval_every": None})
    (log_on,) = run_job(on, tmp_path / "on")
    (log_off,) = run_job(off, tmp_path / "off")
    n_on = len(load_log(log_on).points)
    n_off = len(load_log(log_off).points)
    assert n_on == 1 + 5 * 3 and n_off == 5
    from safetensors.torch import load_file

    w_on = load_file(tmp_path / "on" / "model-seed0.safetensors")
    w_off = load_file(tmp_path / "off" / "model-seed0.safetensors")
    assert w_on.keys() == w_off.keys()
    if arch == "resnet18-slim":
        assert any("running_mean" in k for k in w_on)
    for key in w_on:
        assert torch.equal(w_on[key], w_off[key]), key
    # and the training actually moved the weights away from the initialisation
    torch.manual_seed(0)
    init = build_model(arch, (1, 8, 8), 10).state_dict()
    assert any(not torch.equal(init[k], w_on[k]) for k in init)


def test_points_follow_the_contract(tmp_path, synthetic_spec):
    spec = synthetic_spec(**{"evaluation.eval_every": 3, "evaluation.before_first_update": True})
    (path,) = run_job(spec, tmp_path)
    log = load_log(path)
    assert log.partial is False
    iters = [p.iteration for p in log.points]
    assert iters[0] == 0 and log.points[0].task == 1 and not log.points[0].task_end
    # 60 samples per task, batch 8 → 8 updates per task; points every 3 updates and at task ends
    assert [p.iteration for p in log.points if p.task_end] == [8, 16, 24]
    assert [i for i in iters if i % 3 == 0 and i > 0] == [3, 6, 9, 12, 15, 18, 21, 24]
    for p in log.points:  # only tasks seen so far are evaluated (no future evaluation)
        seen = {c for t in log.tasks[: p.task] for c in t}
        assert all((t > 0) == (c in seen) for c, t in enumerate(p.total))
        assert all(t == 10 for c, t in enumerate(p.total) if c in seen)
    assert log.meta["eval_every"] == 3 and log.meta["strategy"] == "finetune"


def test_future_tasks_and_subsample(tmp_path, synthetic_spec):
    spec = synthetic_spec(**{"evaluation.future_tasks": True, "evaluation.subsample_per_task": 7})
    (path,) = run_job(spec, tmp_path)
    log = load_log(path)
    for p in log.points:
        assert sum(p.total) == 3 * 7  # every task, 7 samples each (fixed subsample)
    assert len({tuple(p.total) for p in log.points}) == 1  # the same subsample at every point
    # predictions are over seen classes only, so unseen (future) classes are never right
    first = log.points[0]
    assert all(first.correct[c] == 0 for c in log.tasks[2])


def test_first_task_learned_is_evaluated_not_trained(tmp_path, synthetic_spec):
    from safetensors.torch import save_file

    weights = tmp_path / "candidate.safetensors"
    save_file(build_model("mlp", (8,), 6, hidden=32).state_dict(), str(weights))
    spec = synthetic_spec(
        **{
            "scenario.first_task_learned": True,
            "strategy.name": "er",
            "strategy.mem_size": 12,
            "model.weights": str(weights),
        }
    )
    (path,) = run_job(spec, tmp_path)
    log = load_log(path)
    assert log.points[0].iteration == 0 and log.points[0].task == 1 and log.points[0].task_end
    assert log.meta["iterations_per_task"] == [0, 8, 8]
    assert log.resources[0].ops_train == 0
    # er took the learned task's samples into its memory (12 samples × (8 floats + 1 label))
    assert log.resources[0].buffer_bytes == 12 * (8 * 4 + 8)


def test_explicit_groups_and_shuffled_order(tmp_path, synthetic_spec):
    spec = synthetic_spec(scenario={"tasks": [[5], [0, 1, 2], [3, 4]]})
    (path,) = run_job(spec, tmp_path / "a")
    assert load_log(path).tasks == [[5], [0, 1, 2], [3, 4]]
    spec = synthetic_spec(**{"scenario.shuffle_seed": 3})
    (path,) = run_job(spec, tmp_path / "b")
    tasks = load_log(path).tasks
    assert sorted(c for t in tasks for c in t) == list(range(6)) and tasks != [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(EngineInputError, match="do not split into 4 equal tasks"):
        run_job(synthetic_spec(**{"scenario.n_tasks": 4}), tmp_path / "c")
    with pytest.raises(EngineInputError, match=r"class id\(s\) \[9\] out of range"):
        run_job(synthetic_spec(scenario={"tasks": [[0, 1, 2], [3, 4, 9]]}), tmp_path / "d")


def test_resources_per_task(tmp_path, digits_spec):
    spec = digits_spec(
        **{
            "strategy.name": "er",
            "strategy.mem_size": 50,
            "training.epochs": 1,
            "evaluation.eval_every": None,
        }
    )
    (path,) = run_job(spec, tmp_path)
    log = load_log(path)
    assert len(log.resources) == 5
    per_sample_fb = 2 * (64 * 400 + 400 * 400 + 400 * 10) + (
        400 * 400 + 400 * 10
    )  # fwd + weight grads + input grads
    assert log.meta["muladds_per_sample"]["train"] == pytest.approx(per_sample_fb)
    for k, r in enumerate(log.resources):
        n_k = r.train_bytes // (64 * 4 + 8)
        assert (
            r.train_bytes == n_k * (64 * 4 + 8) and 270 < n_k < 300
        )  # two digit classes, 80 % of ~180 images each
        assert r.model_params == 190410
        assert r.ops_pass == pytest.approx(n_k * per_sample_fb)
        # new samples once (1 epoch) plus a replay batch of 16 at every update after the first
        iters = log.meta["iterations_per_task"][k]
        replayed = 16 * (iters - 1) if k == 0 else 16 * iters
        assert r.ops_train == pytest.approx((n_k + replayed) * per_sample_fb)
    assert log.resources[-1].buffer_bytes == 50 * (64 * 4 + 8)


def test_should_stop_leaves_a_valid_partial_log(tmp_path, synthetic_spec):
    # should_stop is polled by the trusted side while the child trains; the child checks for the
    # stop after every update. Stop once the point at iteration 10 has been counted.
    counted = {"ten": False}

    def progress(p: Progress) -> None:
        counted["ten"] = counted["ten"] or (p.seed == 0 and p.iteration >= 10)

    spec = synthetic_spec(seeds=[0, 1], **{"training.iterations": 3000})
    with pytest.raises(JobCancelled) as info:
        run_job(spec, tmp_path, should_stop=lambda: counted["ten"], progress=progress)
    assert info.value.paths == [tmp_path / "log-seed0.json"]
    log = load_log(info.value.paths[0])
    assert log.partial and log.finished_tasks == 0
    # the points written so far: every 2 updates, up to where the child saw the stop (inside task 1)
    iterations = [p.iteration for p in log.points]
    assert iterations[:5] == [2, 4, 6, 8, 10] and iterations == list(range(2, 2 * len(iterations) + 1, 2))
    assert iterations[-1] < 3000 and not log.resources
    assert not (tmp_path / "log-seed1.json").exists()


def test_keyboard_interrupt_leaves_a_valid_partial_log(tmp_path, synthetic_spec):
    seen: list[Progress] = []

    def progress(p: Progress) -> None:
        seen.append(p)
        if p.task == 3 and p.iteration >= 18:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as info:
        run_job(synthetic_spec(), tmp_path, progress=progress)
    assert info.value.paths == [tmp_path / "log-seed0.json"]  # type: ignore[attr-defined]
    log = load_log(tmp_path / "log-seed0.json")
    assert log.partial and log.finished_tasks == 2
    assert seen[0].n_tasks == 3 and seen[0].total_iterations == 24
    assert all(p.seed == 0 and 0 <= p.iteration <= 24 for p in seen)
    assert any(p.last_eval is not None and 0 <= p.last_eval <= 1 for p in seen)


def _save_checkpoints(tmp_path, n: int, seed: int = 0):
    from safetensors.torch import save_file

    torch.manual_seed(seed)
    paths, models = [], []
    for k in range(n):
        m = build_model("mlp", (8,), 6, hidden=32)
        p = tmp_path / f"ck{k}.safetensors"
        save_file(m.state_dict(), str(p))
        paths.append(p)
        models.append(m)
    return paths, models


def test_evaluate_mode_counts_match_a_naive_loop(tmp_path, synthetic_spec):
    from clgate.engine.data import load_data

    paths, models = _save_checkpoints(tmp_path, 3)
    spec = synthetic_spec(mode="evaluate", checkpoints=[str(p) for p in paths])
    (path,) = run_job(spec, tmp_path / "out")
    log = load_log(path)
    assert [(p.iteration, p.task, p.task_end) for p in log.points] == [
        (1, 1, True),
        (2, 2, True),
        (3, 3, True),
    ]
    assert log.resources is None
    ds = load_data(spec.data)
    for k, (point, model) in enumerate(zip(log.points, models, strict=False)):
        seen = [c for t in log.tasks[: k + 1] for c in t]
        correct = [0] * 6
        total = [0] * 6
        with torch.no_grad():
            for x, y in zip(ds.x_test, ds.y_test, strict=True):
                if y not in seen:
                    continue
                logits = model(torch.from_numpy(x)[None])[0]
                pred = max(seen, key=lambda c: float(logits[c]))
                total[y] += 1
                correct[y] += int(pred == y)
        assert point.correct == correct and point.total == total


def test_evaluate_mode_with_iterations(tmp_path, synthetic_spec):
    paths, _ = _save_checkpoints(tmp_path, 4)
    cks = [f"{paths[0]}@5:1", f"{paths[1]}@10:1", f"{paths[2]}@20:2", f"{paths[3]}@30:3"]
    (path,) = run_job(synthetic_spec(mode="evaluate", checkpoints=cks), tmp_path / "out")
    log = load_log(path)
    assert [(p.iteration, p.task, p.task_end) for p in log.points] == [
        (5, 1, False),
        (10, 1, True),
        (20, 2, True),
        (30, 3, True),
    ]
    bad = synthetic_spec(mode="evaluate", checkpoints=[str(p) for p in paths])
    with pytest.raises(EngineInputError, match="4 given for 3 tasks"):
        run_job(bad, tmp_path / "bad")


def test_run_job_resolves_relative_paths_against_base_dir(tmp_path, synthetic_spec):
    from clgate.engine.data import make_synthetic

    ds = make_synthetic(n_classes=4, n_features=5, train_per_class=10, test_per_class=4)
    (tmp_path / "data").mkdir()
    np.savez(
        tmp_path / "data" / "d.npz",
        x_train=ds.x_train,
        y_train=ds.y_train,
        x_test=ds.x_test,
        y_test=ds.y_test,
    )
    spec = synthetic_spec(**{"data": {"kind": "npz", "path": "data/d.npz"}, "scenario.n_tasks": 2})
    (path,) = run_job(spec, tmp_path / "out", base_dir=tmp_path)
    log = load_log(path)
    assert log.meta["data"]["source"] == str(tmp_path / "data" / "d.npz")
    assert math.isclose(sum(log.points[-1].total), 16)


def test_evaluate_mode_accepts_torchscript_checkpoints(tmp_path, synthetic_spec):
    paths, models = _save_checkpoints(tmp_path, 3)
    ts = tmp_path / "ck2.ts"
    torch.jit.save(torch.jit.script(models[2]), str(ts))
    spec = synthetic_spec(**{"mode": "evaluate", "checkpoints": [str(paths[0]), str(paths[1]), str(ts)]})
    (a,) = run_job(spec, tmp_path / "a")
    spec = synthetic_spec(**{"mode": "evaluate", "checkpoints": [str(p) for p in paths]})
    (b,) = run_job(spec, tmp_path / "b")
    # the scripted checkpoint is the same network as the safetensors one: the same counts
    assert load_log(a).points == load_log(b).points


@pytest.mark.parametrize("arch", ["cnn", "resnet18-slim"])
def test_image_folder_with_conv_nets(tmp_path, arch):
    from PIL import Image

    from clgate.schemas.job import JobSpec

    rng = np.random.default_rng(0)
    for split, n in (("train", 6), ("test", 3)):
        for c, name in enumerate(("dark", "mid", "light", "noisy")):
            folder = tmp_path / "imgs" / split / name
            folder.mkdir(parents=True)
            for i in range(n):
                level = 60 * c + rng.integers(0, 20)
                Image.fromarray(np.full((10, 10), level, dtype=np.uint8)).save(folder / f"{i}.png")
    spec = JobSpec.parse(
        {
            "data": {"kind": "image_folder", "path": "imgs", "size": [8, 8], "color": "L"},
            "scenario": {"n_tasks": 2},
            "model": {"arch": arch},
            "training": {"iterations": 3, "batch_size": 4},
            "evaluation": {"eval_every": 2},
            "device": "cpu",
        }
    )
    (path,) = run_job(spec, tmp_path / "out", base_dir=tmp_path)
    log = load_log(path)
    assert log.class_names == ["dark", "light", "mid", "noisy"]
    assert [(p.iteration, p.task_end) for p in log.points] == [(2, False), (3, True), (4, False), (6, True)]
    assert sum(log.points[-1].total) == 12 and log.resources[0].train_bytes == 12 * (64 * 4 + 8)


def test_run_job_leaves_the_callers_torch_state_alone(tmp_path, synthetic_spec):
    torch.manual_seed(1234)
    state = torch.get_rng_state()
    threads = torch.get_num_threads()
    run_job(synthetic_spec(**{"cpu_threads": 1}), tmp_path)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.get_num_threads() == threads
