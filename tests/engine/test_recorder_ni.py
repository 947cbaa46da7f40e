"""The recorder in new-instances (NI) and mixed (NIC) scenarios: a plain loop writes the engine's cell log,
the declaration's errors name the argument, and an NC recorder writes byte for byte what it always did."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from clgate import Recorder
from clgate.documents import load_log
from clgate.engine import run_job
from clgate.engine.data import load_data
from clgate.engine.errors import EngineInputError
from clgate.engine.models import load_model
from clgate.metrics import compute_metrics
from clgate.schemas.evaluation_log import EvaluationLog
from clgate.schemas.job import JobSpec
from tests.fixtures.cli import run_clgate

GOLDEN = Path(__file__).parent / "data" / "recorder_nc_golden.json"
GROUPS = ("day", "dusk", "night")
NAMES = ["bolt", "nut", "washer"]


def _parts(path: Path) -> Path:
    """3 classes seen under 3 lighting groups (each group shifts every input); uneven cell sizes."""
    rng = np.random.default_rng(11)
    centres = rng.normal(0.0, 3.0, size=(3, 5))
    shifts = rng.normal(0.0, 1.5, size=(3, 5))
    arrays: dict[str, np.ndarray] = {}
    for split, n in (("train", 12), ("test", 4)):
        sizes = [[n + g + c for c in range(3)] for g in range(3)]
        y = np.concatenate([np.full(s, c) for row in sizes for c, s in enumerate(row)])
        g = np.concatenate([np.full(s, gi) for gi, row in enumerate(sizes) for s in row])
        x = centres[y] + shifts[g] + rng.normal(size=(len(y), 5))
        arrays |= {f"x_{split}": x.astype(np.float32), f"y_{split}": y.astype(np.int64)}
        arrays[f"lighting_{split}"] = np.array(GROUPS)[g]
    np.savez(path, **arrays, class_names=np.array(NAMES))
    return path


def _spec(scenario: dict) -> JobSpec:
    return JobSpec.parse(
        {
            "data": {"kind": "npz", "path": "parts.npz", "groups": "lighting"},
            "scenario": scenario,
            "model": {"arch": "mlp", "hidden": 16},
            "training": {"lr": 0.1, "batch_size": 8, "epochs": 2},
            "evaluation": {"eval_every": 3},
            "seeds": [0],
            "device": "cpu",
        }
    )


def _own_loop(spec: JobSpec, base: Path) -> Recorder:
    """The engine's finetune run written by hand, with the recorder declaring the same scenario."""
    data = load_data(spec.data, base)
    scenario = spec.scenario
    order = scenario.groups or list(data.group_names)
    brought = scenario.classes or [list(range(data.n_classes))] * len(order)
    group_test = np.asarray(data.group_names)[data.group_test]  # the names, as a user has them
    declared = {"classes": brought} if scenario.type == "nic" else {}
    recorder = Recorder(
        data.x_test,
        data.y_test,
        scenario=scenario.type,
        group_test=group_test,
        groups=order,
        class_names=data.class_names,
        eval_every=spec.evaluation.eval_every,
        device="cpu",
        **declared,
    )
    torch.manual_seed(0)
    model, _ = load_model(
        arch="mlp", weights=None, torchscript=None, input_shape=data.input_shape, n_classes=3, hidden=16
    )
    x_train, y_train = torch.from_numpy(data.x_train), torch.from_numpy(data.y_train)
    generator = torch.Generator().manual_seed(0)
    seen = torch.zeros(3, dtype=torch.bool)
    for group, classes in zip(order, brought, strict=True):
        seen[classes] = True
        in_task = (data.group_train == data.group_names.index(group)) & np.isin(data.y_train, classes)
        idx = torch.from_numpy(np.flatnonzero(in_task))
        x_k, y_k = x_train[idx], y_train[idx]
        optimizer = torch.optim.SGD(model.parameters(), lr=spec.training.lr)
        steps = math.ceil(len(y_k) / spec.training.batch_size)
        for _ in range(spec.training.epochs):
            perm = torch.randperm(len(y_k), generator=generator)
            for s in range(steps):
                b = perm[s * spec.training.batch_size : (s + 1) * spec.training.batch_size]
                loss = F.cross_entropy(model(x_k[b]).masked_fill(~seen, float("-inf")), y_k[b])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                recorder.step(model, samples=len(b))
        recorder.task_end(model, train_size=len(y_k), train_bytes=int(x_k.nbytes + y_k.nbytes))
    return recorder


@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param({"type": "ni", "groups": ["night", "day", "dusk"]}, id="ni"),
        pytest.param(
            {"type": "nic", "groups": ["day", "night", "day"], "classes": [[0, 1], [0, 1, 2], [2]]}, id="nic"
        ),
    ],
)
def test_plain_loop_writes_the_engines_cell_log(tmp_path, scenario):
    _parts(tmp_path / "parts.npz")
    spec = _spec(scenario)
    [path] = run_job(spec, tmp_path / "out", base_dir=tmp_path)
    engine = load_log(path)
    mine = _own_loop(spec, tmp_path).log()
    assert not mine.partial and not engine.partial
    for field in ("scenario", "class_of", "groups", "tasks", "class_names"):
        assert getattr(mine, field) == getattr(engine, field), field
    assert [p.model_dump() for p in mine.points] == [p.model_dump() for p in engine.points]
    assert [r.model_dump() for r in mine.resources] == [r.model_dump() for r in engine.resources]
    assert mine.meta["iterations_per_task"] == engine.meta["iterations_per_task"]
    assert mine.meta["scenario"] == engine.meta["scenario"]
    assert mine.model_dump(include={"scenario", "class_of", "groups"}) == {
        "scenario": scenario["type"],
        "class_of": engine.class_of,
        "groups": scenario["groups"],
    }
    # the run learned something, and its cells are not all equal: equality is not that of two empty logs
    last = mine.points[-1]
    assert sum(last.correct) > 0.5 * sum(last.total) and len(set(last.total)) > 1
    assert compute_metrics(mine).metrics == compute_metrics(engine).metrics


POLICY = """\
format: clgate.policy/v1
name: ni-floor
rules:
  - {metric: acc, floor: 0.3}
  - {classes: "*", at: final, floor: 0.01, severity: warn}
"""


def test_an_ni_recorder_log_goes_through_metrics_and_gate(tmp_path):
    _parts(tmp_path / "parts.npz")
    recorder = _own_loop(_spec({"type": "ni"}), tmp_path)
    recorder.save(tmp_path / "own.json")
    (tmp_path / "policy.yaml").write_text(POLICY)
    metrics = run_clgate("metrics", "own.json", "--json", cwd=tmp_path)
    assert metrics.returncode == 0, metrics.stderr
    result = json.loads(metrics.stdout)
    assert result["metrics"]["raa"] == result["metrics"]["acc"]  # NI: C_k = 3 classes at every task
    assert [c["name"] for c in result["classes"]][:4] == [
        "bolt @ day",
        "nut @ day",
        "washer @ day",
        "bolt @ dusk",
    ]
    gate = run_clgate("gate", "own.json", "-p", "policy.yaml", "-o", "report", cwd=tmp_path)
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert "washer @ night" in (tmp_path / "report" / "report.md").read_text()


def test_nic_predicts_over_the_classes_brought_so_far():
    """Class 2 comes with task 2: at task 1 it is masked (``seen``) and a model that prefers it is right
    on its next-best class; with ``predict_over="all"`` it is wrong everywhere."""
    x = torch.zeros(6, 1)
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    group = ["a", "a", "a", "b", "b", "b"]

    class Prefers2Then1(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.tensor([0.0, 1.0, 5.0]).expand(len(x), 3)

    for over, expect in (("seen", [0, 1, 0, 0]), ("all", [0, 0, 0, 0])):
        rec = Recorder(
            x, y, scenario="nic", group_test=group, groups=["a", "b"], classes=[[0, 1], [1, 2]],
            predict_over=over, device="cpu",
        )  # fmt: skip
        rec.step(Prefers2Then1())
        rec.task_end(Prefers2Then1())
        assert rec.tasks == [[0, 1], [2, 3]] and rec.task_classes == [[0, 1], [1, 2]]
        assert rec.log().points[0].correct == expect
        assert rec.log().points[0].total == [1, 1, 0, 0]


def test_group_ids_default_order_and_future_tasks():
    """Integer group ids work; without ``groups`` NI takes them sorted; counts land in the sample's cell."""
    x = torch.eye(2).repeat(4, 1)  # logits = inputs: sample i predicts class i % 2, always right
    y = torch.tensor([0, 1] * 4)
    group = np.array([7, 7, 3, 3, 7, 7, 3, 3])
    rec = Recorder(x, y, scenario="ni", group_test=group, future_tasks=True, device="cpu")
    rec.step(torch.nn.Identity())
    rec.task_end(torch.nn.Identity())
    log = rec.log()
    assert log.groups == ["3", "7"] and log.cell_names() == ["0 @ 3", "1 @ 3", "0 @ 7", "1 @ 7"]
    assert log.points[0].total == [2, 2, 2, 2] and log.points[0].correct == [2, 2, 2, 2]
    assert log.partial and log.meta["scenario"] == {"type": "ni", "groups": ["3", "7"]}
    assert rec.scenario == "ni" and rec.n_classes == 2 and rec.tasks == [[0, 1], [2, 3]]


X, Y = torch.zeros(8, 2), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
G = ["d", "d", "d", "n", "n", "n", "d", "n"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"scenario": "ni"}, r"group_test: required for scenario 'ni'", id="no-groups"),
        pytest.param(
            {"scenario": "ni", "group_test": G[:5]}, r"group_test: 5 groups for 8 held-out", id="length"
        ),
        pytest.param(
            {"scenario": "ni", "group_test": np.zeros((8, 2))},
            r"group_test: expected a 1-D array",
            id="shape",
        ),
        pytest.param(
            {"scenario": "ni", "group_test": G, "groups": ["d", "x"]},
            r"groups: no sample group 'x' in group_test \(its groups: d, n\)",
            id="unknown-group",
        ),
        pytest.param(
            {"scenario": "ni", "group_test": G, "groups": ["d", "d"]},
            r"groups: a group appears more than once",
            id="repeated-group",
        ),
        pytest.param(
            {"scenario": "ni", "group_test": [g.replace("n", "n@1") for g in G]},
            r"group_test: 'n@1' is not a group name",
            id="at-in-name",
        ),
        pytest.param(
            {"scenario": "ni", "group_test": G, "tasks": [[0, 1, 2]]},
            r"tasks: only for scenario 'nc'; a ni scenario's tasks are its sample groups",
            id="tasks-in-ni",
        ),
        pytest.param(
            {"scenario": "ni", "group_test": G, "classes": [[0], [1]]},
            r"classes: only for scenario 'nic'",
            id="classes-in-ni",
        ),
        pytest.param(
            {"scenario": "nic", "group_test": G, "groups": ["d", "n"]},
            r"nic needs groups .* and classes",
            id="nic-no-classes",
        ),
        pytest.param(
            {"scenario": "nic", "group_test": G, "groups": ["d", "n"], "classes": [[0, 1]]},
            r"classes: 1 lists for 2 groups",
            id="nic-lengths",
        ),
        pytest.param(
            {"scenario": "nic", "group_test": G, "groups": ["d", "n"], "classes": [[0], [1]]},
            r"classes: class id\(s\) \[2\] are in no task \(every class of y_test",
            id="nic-label-in-no-task",
        ),
        pytest.param(
            {
                "scenario": "nic",
                "group_test": G,
                "groups": ["d", "n"],
                "classes": [[0], [2]],
                "class_names": ["a", "b", "c"],
            },
            r"classes: class id\(s\) \[1\] are in no task",
            id="nic-uncovered",
        ),
        pytest.param(
            {"scenario": "nic", "group_test": G, "groups": ["d", "n", "d"], "classes": [[0], [1, 2], [0, 2]]},
            r"classes\[2\]: group 'd' already brought class\(es\) \[0\] in task 1",
            id="nic-group-brings-twice",
        ),
        pytest.param(
            {"scenario": "ni", "group_test": G, "class_names": ["a", "b", "c", "d"]},
            r"task 1 \(group 'd'\) has no held-out sample of class 'd'",
            id="empty-cell",
        ),
        pytest.param(
            {"scenario": "nc", "tasks": [[0, 1, 2]], "group_test": G}, r"group_test: only for", id="nc"
        ),
        pytest.param(
            {"scenario": "ni", "group_test": G, "class_names": ["a", "b"]},
            r"y_test: labels must be 0 … 1",
            id="label-beyond-class-names",
        ),
        pytest.param(
            {
                "scenario": "nic",
                "group_test": G,
                "groups": ["d", "n"],
                "classes": [[0, 1], [2, 3]],
                "class_names": ["a", "b", "c"],
            },
            r"classes: class id\(s\) \[3\] out of range",
            id="nic-class-beyond-class-names",
        ),
        pytest.param({"scenario": "nc"}, r"tasks: required for scenario 'nc'", id="nc-no-tasks"),
        pytest.param({"scenario": "new", "tasks": [[0, 1, 2]]}, r"scenario: 'nc', 'ni' or 'nic'", id="kind"),
    ],
)
def test_a_bad_declaration_names_the_argument(kwargs, message):
    with pytest.raises(EngineInputError, match=message):
        Recorder(X, Y, device="cpu", **kwargs)


def _golden_run(path: Path) -> Path:
    """A deterministic NC run: integer inputs and weights, so every logit is exact on any CPU."""
    g = torch.Generator().manual_seed(3)
    y = torch.arange(36) % 4
    x = (F.one_hot(y, 4) * 3 + torch.randint(-2, 3, (36, 4), generator=g)).float()
    model = torch.nn.Linear(4, 4, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.eye(4)[[1, 0, 3, 2]])
    rec = Recorder(
        x,
        y,
        tasks=[[1, 3], [0], [2]],
        class_names=["a", "b", "c", "d"],
        eval_every=3,
        subsample_per_task=7,
        seed=5,
        device="cpu",
        meta={"run": "golden"},
    )
    rec.start(model)
    for k in range(3):
        for s in range(4 + k):
            with torch.no_grad():
                model.weight[(s + k) % 4] += torch.eye(4)[(s * 3 + k) % 4]
            rec.step(model, samples=5)
        rec.task_end(model, train_size=20 + k, train_bytes=320 + 16 * k, buffer_bytes=8 * k)
    return rec.save(path)


def test_an_nc_log_is_byte_for_byte_what_the_recorder_wrote_before_ni(tmp_path):
    """``recorder_nc_golden.json`` was written by the recorder before it knew NI/NIC; only the versions of
    the machine that runs the test may differ."""
    written = _golden_run(tmp_path / "log.json").read_text()
    golden = GOLDEN.read_text()
    versions = [
        json.dumps(json.loads(t)["meta"]["versions"], separators=(",", ":")) for t in (golden, written)
    ]
    assert golden.count(versions[0]) == 1
    assert written == golden.replace(versions[0], versions[1])
    log = EvaluationLog.parse(written)
    assert "scenario" not in written and log.scenario == "nc" and log.class_of is None


def test_the_lightning_callback_feeds_an_ni_recorder_as_a_plain_loop_does(tmp_path):
    """The callback passes no task structure: an NI recorder behind it writes the plain loop's cell log."""
    pl = pytest.importorskip("lightning.pytorch")
    from torch.utils.data import DataLoader, TensorDataset

    from clgate.engine.lightning import RecorderCallback

    class Classifier(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(5, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

        def training_step(self, batch, batch_idx):  # type: ignore[no-untyped-def]
            return F.cross_entropy(self(batch[0]), batch[1])

        def configure_optimizers(self):  # type: ignore[no-untyped-def]
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = load_data({"kind": "npz", "path": str(_parts(tmp_path / "parts.npz")), "groups": "lighting"})
    order = ["dusk", "night"]
    in_group = [data.group_train == data.group_names.index(g) for g in order]
    sets = [
        TensorDataset(torch.from_numpy(data.x_train[m]), torch.from_numpy(data.y_train[m])) for m in in_group
    ]
    group_test = np.asarray(data.group_names)[data.group_test]

    def recorder() -> Recorder:
        return Recorder(
            data.x_test,
            data.y_test,
            scenario="ni",
            group_test=group_test,
            groups=order,
            class_names=data.class_names,
            eval_every=2,
        )

    torch.manual_seed(0)
    module, through_lightning = Classifier(), recorder()
    callback = RecorderCallback(through_lightning)
    for ds in sets:
        trainer = pl.Trainer(
            max_epochs=2,
            callbacks=[callback],
            accelerator="cpu",
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        trainer.fit(module, DataLoader(ds, batch_size=8, shuffle=False))
    torch.manual_seed(0)
    model, plain = Classifier(), recorder()
    for ds in sets:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            for x, y in DataLoader(ds, batch_size=8, shuffle=False):
                optimizer.zero_grad()
                F.cross_entropy(model(x), y).backward()
                optimizer.step()
                plain.step(model, samples=len(y))
        plain.task_end(model)
    mine, theirs = through_lightning.log(), plain.log()
    assert not mine.partial and mine.scenario == "ni" and mine.groups == order
    assert mine.cell_names()[3] == "bolt @ night"
    assert [p.model_dump() for p in mine.points] == [p.model_dump() for p in theirs.points]
    assert sum(mine.points[-1].correct) > 0.4 * sum(mine.points[-1].total)


def test_the_avalanche_plugin_feeds_an_nic_recorder_as_a_plain_loop_does(tmp_path):
    """Avalanche's hooks (after_update per optimizer step, after_training_exp per experience) in its
    order: one experience per task of an NIC scenario, the recorder holding the structure."""
    from types import SimpleNamespace

    from clgate.engine.avalanche import RecorderPlugin

    data = load_data({"kind": "npz", "path": str(_parts(tmp_path / "parts.npz")), "groups": "lighting"})
    order, brought = ["day", "night", "day"], [[0, 1], [0, 1, 2], [2]]
    group_test = np.asarray(data.group_names)[data.group_test]
    logs = []
    for use_plugin in (True, False):
        torch.manual_seed(0)
        model = torch.nn.Linear(5, 3)
        recorder = Recorder(
            data.x_test,
            data.y_test,
            scenario="nic",
            group_test=group_test,
            groups=order,
            classes=brought,
            eval_every=3,
            device="cpu",
        )
        plugin = RecorderPlugin(recorder, path=tmp_path / "log.json")
        for group, classes in zip(order, brought, strict=True):
            m = (data.group_train == data.group_names.index(group)) & np.isin(data.y_train, classes)
            x, y = torch.from_numpy(data.x_train[m]), torch.from_numpy(data.y_train[m])
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for b in torch.arange(len(y)).split(8):
                optimizer.zero_grad()
                F.cross_entropy(model(x[b]), y[b]).backward()
                optimizer.step()
                if use_plugin:
                    plugin.after_update(SimpleNamespace(model=model, mb_x=x[b], mb_y=y[b]))
                else:
                    recorder.step(model, samples=len(b))
            if use_plugin:
                plugin.after_training_exp(SimpleNamespace(model=model, experience=None))
            else:
                recorder.task_end(model)
        logs.append(load_log(tmp_path / "log.json") if use_plugin else recorder.log())
    assert logs[0].model_dump(exclude={"meta"}) == logs[1].model_dump(exclude={"meta"})
    assert logs[0].scenario == "nic" and logs[0].class_of == [0, 1, 0, 1, 2, 2] and not logs[0].partial
