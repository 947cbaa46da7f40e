"""Issue 19: the process that runs the model gets held-out inputs without labels and returns
predictions; the trusted side counts and writes the log.

A compromised child — the real child with a bad model (it predicts class 0 for everything), which also
writes a perfect log where the trusted log will be, claims perfect counts in its messages, and, by
mode, sends out-of-range predictions, too many predictions or messages after its last seed — changes
nothing: the log holds the counts its predictions earned, and the gate fails it. Run as a plain
subprocess (the command line's default), through the service's launcher unconfined
(``CLGATE_SANDBOX=none``) and inside bubblewrap. The honest path counts exactly what the in-process
evaluator counts on the same model.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from clgate.documents import load_log, parse_overrides
from clgate.engine import run_job
from clgate.engine.data import load_data
from clgate.engine.evaluator import ContinualEvaluator, select_heldout
from clgate.engine.models import apply_weights, build_model, load_state_dict_file
from clgate.engine.protocol import (
    MAX_HEADER_BYTES,
    FrameReader,
    ProtocolError,
    check_predictions,
    encode_frame,
)
from clgate.engine.runner import ChildLaunch, local_launcher
from clgate.engine.scenario import tasks_from_spec
from clgate.engine.staging import stage_job
from clgate.policy import decide, parse_policy
from clgate.schemas.evaluation_log import EvaluationLog

POLICY = parse_policy(
    {"name": "p", "rules": [{"metric": "mica", "floor": 0.5}, {"metric": "acc", "floor": 0.5}]}
)

# The compromised child: the real child, patched. {mode}, {target} and {perfect} are filled in.
COMPROMISED = """
import os, sys
import numpy as np
import clgate.engine.child as child
import clgate.engine.training as training

MODE, TARGET, PERFECT = {mode!r}, {target!r}, {perfect!r}
for path in (TARGET, os.path.join(sys.argv[2], "log-seed0.json")):
    try:
        with open(path, "w") as f:
            f.write(PERFECT)
    except OSError:
        pass

real_predict = training.HeldoutPredictor.predict
def predict(self, fn, model):
    preds = real_predict(self, fn, model)
    preds[:] = 0  # a bad model: class 0 for everything
    return preds
training.HeldoutPredictor.predict = predict

real_send = child.PipeChannel.send
state = {{"points": 0}}
def send(self, header, payload=None):
    if header["type"] == "point":
        state["points"] += 1
        n = len(payload)
        header = {{**header, "correct": [n] * 6, "total": [n] * 6, "accuracy": [1.0] * 6}}  # claimed
        if MODE == "out_of_range" and state["points"] == 3:
            payload = np.full_like(payload, 6)
        if MODE == "too_many" and state["points"] == 3:
            payload = np.zeros(n + 1, dtype=payload.dtype)
        state["last"] = payload
    real_send(self, header, payload)
    if MODE == "extra" and header["type"] == "seed_end":
        extra = {{"type": "point", "seed": 0, "iteration": 99, "task": 3, "task_end": True}}
        real_send(self, extra, state["last"])
child.PipeChannel.send = send
sys.argv[0] = "child"
sys.exit(child.main(sys.argv[1:]))
"""


def _perfect_log(spec, tmp_path: Path) -> str:
    """A log with every class at 1.0: what a compromised child would like the gate to read."""
    honest = run_job(spec, tmp_path / "honest")[0]
    doc = json.loads(honest.read_text())
    for point in doc["points"]:
        point["correct"] = list(point["total"])
    return json.dumps(doc)


def _source(mode: str, target: Path, perfect: str) -> str:
    return COMPROMISED.format(mode=mode, target=str(target), perfect=perfect)


def _plain_launcher(source: str):
    def launch(launch: ChildLaunch) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-c", source, *launch.argv()[3:]]
        return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)

    return launch


def _sandbox_launcher(tmp_path: Path, source: str, monkeypatch, mode: str):
    """The service's launcher (bubblewrap, or its unconfined mode ``none``) with the child swapped."""
    from clgate.store.settings import Settings
    from clgate.workers import sandbox

    monkeypatch.setattr(sandbox, "CHILD_COMMAND", ["-c", source])
    settings = Settings(data_dir=tmp_path / "data", sandbox=mode, allow_unconfined=mode == "none")
    return sandbox.SandboxLauncher(settings, mode, None, gpu=False)


def _earned(spec, log: EvaluationLog) -> None:
    """Every point's counts are what "class 0 for everything" earns: class 0 right, the rest wrong."""
    for point in log.points:
        assert point.correct[0] == point.total[0]
        assert point.correct[1:] == [0] * (len(point.correct) - 1)


@pytest.fixture(params=["plain", "none", "bwrap"])
def launcher_kind(request):
    if request.param == "bwrap":
        request.getfixturevalue("require_binary")("bwrap", "bubblewrap")
    return request.param


def _launcher(kind, tmp_path, source, monkeypatch):
    return (
        _plain_launcher(source) if kind == "plain" else _sandbox_launcher(tmp_path, source, monkeypatch, kind)
    )


def test_a_child_that_forges_a_perfect_log_gets_the_counts_it_earned(
    tmp_path, synthetic_spec, launcher_kind, monkeypatch
):
    spec = synthetic_spec()
    out = tmp_path / "out"
    target = out / "log-seed0.json"
    perfect = _perfect_log(spec, tmp_path)
    assert decide([EvaluationLog.model_validate_json(perfect)], POLICY).verdict == "PASS"  # it would pass
    source = _source("forge", target, perfect)
    paths = run_job(spec, out, launcher=_launcher(launcher_kind, tmp_path, source, monkeypatch))
    assert paths == [target]
    log = load_log(target)
    assert not log.partial and len(log.points) > 3
    _earned(spec, log)
    assert decide([log], POLICY).verdict == "FAIL"


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("out_of_range", "predictions out of range: 6"),
        ("too_many", r"a point with 61 predictions; 60 held-out samples were sent"),
        ("extra", "message for seed 0, which is not running"),
    ],
)
def test_a_child_that_sends_garbage_ends_the_job_with_what_it_earned(
    tmp_path, synthetic_spec, launcher_kind, monkeypatch, mode, message
):
    spec = synthetic_spec()
    out = tmp_path / "out"
    target = out / "log-seed0.json"
    source = _source(mode, target, '{"forged": true}')
    with pytest.raises(ProtocolError, match=message):
        run_job(spec, out, launcher=_launcher(launcher_kind, tmp_path, source, monkeypatch))
    log = load_log(target)  # what the trusted side wrote, not the forgery
    _earned(spec, log)
    if mode == "extra":  # the seed had finished: its log is complete, and it still fails the gate
        assert not log.partial
    else:
        assert log.partial and [p.iteration for p in log.points] == [2, 4]
    assert decide([log], POLICY).verdict in ("FAIL", "ERROR")  # never PASS (a partial log is refused)


def test_the_child_never_receives_held_out_labels(tmp_path, synthetic_spec):
    spec = synthetic_spec(**{"evaluation.subsample_per_task": 9})
    data = load_data(spec.data)
    tasks = tasks_from_spec(spec.scenario, data.n_classes)
    selection = select_heldout(
        data.y_test, tasks=tasks, n_classes=6, subsample_per_task=9, seed=data.digest()
    )
    seen: dict[str, object] = {}

    def watching(launch: ChildLaunch) -> subprocess.Popen[bytes]:
        files = sorted(str(p.relative_to(launch.stage)) for p in launch.stage.rglob("*") if p.is_file())
        seen["files"] = files
        seen["arrays"] = {f: np.load(launch.stage / f) for f in files if f.endswith(".npy")}
        seen["text"] = (launch.stage / "spec.json").read_text() + (launch.stage / "data.json").read_text()
        proc = local_launcher(launch)
        proc.stdin = _Recording(proc.stdin)  # type: ignore[assignment]
        seen["sent"] = proc.stdin
        return proc

    run_job(spec, tmp_path / "out", launcher=watching)
    assert seen["files"] == ["data.json", "heldout_x.npy", "spec.json", "train_x.npy", "train_y.npy"]
    arrays: dict[str, np.ndarray] = seen["arrays"]  # type: ignore[assignment]
    heldout = arrays["heldout_x.npy"]
    assert len(heldout) == len(selection.indices) == 27 and heldout.shape[1:] == data.x_test.shape[1:]
    # the inputs of the selected samples, and nothing else: no label array of the held-out size
    assert sorted(map(bytes, heldout)) == sorted(map(bytes, data.x_test[selection.indices]))
    assert not any(len(a) == len(heldout) and a.ndim == 1 for a in arrays.values())
    np.testing.assert_array_equal(arrays["train_y.npy"], data.y_train)
    assert "y_test" not in seen["text"] and "x_test" not in seen["text"]
    assert seen["sent"].data == b""  # nothing else reaches it: no stop was asked  # type: ignore[attr-defined]


class _Recording:
    """The child's standard input, keeping what the trusted side writes to it."""

    def __init__(self, stream) -> None:
        self.stream, self.data = stream, b""

    def write(self, data: bytes) -> int:
        self.data += data
        return self.stream.write(data)

    def close(self) -> None:
        self.stream.close()

    def __getattr__(self, name):
        return getattr(self.stream, name)


def test_the_held_out_order_carries_no_task_and_no_class(tmp_path, synthetic_spec):
    spec = synthetic_spec()
    data = load_data(spec.data)
    tasks = tasks_from_spec(spec.scenario, data.n_classes)
    selection = select_heldout(data.y_test, tasks=tasks, n_classes=6, seed=data.digest())
    a = stage_job(spec, data, tasks, selection, tmp_path / "a")
    b = stage_job(spec, data, tasks, selection, tmp_path / "b")
    # a fresh permutation each time, from the system's randomness: neither task order nor a fixed one
    assert not np.array_equal(a.rank, np.arange(a.n)) and not np.array_equal(a.rank, b.rank)
    np.testing.assert_array_equal(np.sort(a.rank), np.arange(a.n))
    np.testing.assert_array_equal(a.labels, data.y_test[selection.indices][a.rank])


def _model_at(path: Path, spec, data) -> torch.nn.Module:
    model = build_model(spec.model.arch, data.input_shape, data.n_classes, hidden=spec.model.hidden)
    apply_weights(model, load_state_dict_file(path), str(path))
    return model


# icarl predicts with its nearest-mean-of-exemplars classifier, not the model's logits: not comparable here
@pytest.mark.parametrize("strategy", ["finetune", "joint", "er", "gdumb", "lwf", "ewc", "wa", "derpp"])
def test_trusted_counts_equal_the_in_process_evaluator_on_the_same_model(tmp_path, digits_spec, strategy):
    """The end of every strategy's run, on digits: the trusted side's counts from the child's predictions
    are the in-process evaluator's counts on the final model (the evaluator the runner used to call)."""
    spec = digits_spec(
        **{"strategy.name": strategy, "training.save_final": True, "model.hidden": 32, "seeds": [3]}
    )
    [path] = run_job(spec, tmp_path)
    log = load_log(path)
    data = load_data(spec.data)
    tasks = tasks_from_spec(spec.scenario, data.n_classes)
    model = _model_at(tmp_path / "model-seed3.safetensors", spec, data)
    ev = ContinualEvaluator(
        data.x_test,
        torch.from_numpy(data.y_test),
        tasks=tasks,
        n_classes=data.n_classes,
        device=torch.device("cpu"),
        seed=data.digest(),
    )
    correct, total = ev.evaluate(model, model, seen_tasks=len(tasks))
    assert (log.points[-1].correct, log.points[-1].total) == (correct, total)
    assert log.meta["eval_selection"]["samples"] == ev.n_samples


def test_evaluate_mode_counts_equal_the_in_process_evaluator(tmp_path, synthetic_spec):
    spec = synthetic_spec(**{"training.save_final": True, "seeds": [0, 1]})
    run_job(spec, tmp_path / "train")
    cks = [str(tmp_path / "train" / f"model-seed{s}.safetensors") for s in (0, 1, 0)]
    ev_spec = spec.with_overrides(
        parse_overrides(["mode=evaluate", "checkpoints=" + json.dumps(cks), "seeds=[0]"])
    )
    [path] = run_job(ev_spec, tmp_path / "eval")
    log = load_log(path)
    data = load_data(spec.data)
    tasks = tasks_from_spec(spec.scenario, data.n_classes)
    ev = ContinualEvaluator(
        data.x_test,
        torch.from_numpy(data.y_test),
        tasks=tasks,
        n_classes=6,
        device=torch.device("cpu"),
        seed=data.digest(),
    )
    for k, (ck, point) in enumerate(zip(cks, log.points, strict=True)):
        model = _model_at(Path(ck), spec, data)
        seen = torch.zeros(6, dtype=torch.bool)
        for classes in tasks[: k + 1]:
            seen[classes] = True

        def masked(x, model=model, seen=seen):
            return model(x).masked_fill(~seen, float("-inf"))

        assert (point.correct, point.total) == ev.evaluate(masked, model, seen_tasks=k + 1)
    assert [c["path"] for c in log.meta["checkpoints"]] == cks


# ---------------------------------------------------------------------- the frames themselves
def _reader(n: int = 3) -> FrameReader:
    return FrameReader(np.dtype("<i2"), expected_n=n)


def test_frames_round_trip_in_pieces():
    raw = encode_frame({"type": "progress", "iteration": 1}) + encode_frame(
        {"type": "point"}, np.array([1, -1, 2], dtype="<i2")
    )
    reader = _reader()
    frames = []
    for i in range(len(raw)):  # one byte at a time
        reader.feed(raw[i : i + 1])
        while (frame := reader.next_frame()) is not None:
            frames.append(frame)
    assert [f[0]["type"] for f in frames] == ["progress", "point"]
    assert frames[1][1].tolist() == [1, -1, 2]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"\xff\xff\xff\xff", "header of 4294967295 bytes"),
        (b"\x00\x00\x00\x03abc", "not JSON"),
        (b"\x00\x00\x00\x02[]", "unknown message 'list'"),
        (encode_frame({"type": "write_log"}), "unknown message 'write_log'"),
        (encode_frame({"type": "point"}, np.zeros(4, dtype="<i2")), "4 predictions; 3 held-out"),
        (encode_frame({"type": "point", "n": "3"}), "'3' predictions"),
    ],
)
def test_garbage_frames_are_refused(raw, message):
    reader = _reader()
    reader.feed(raw)
    with pytest.raises(ProtocolError, match=message):
        reader.next_frame()


def test_a_header_over_the_configured_bound_is_refused_naming_it():
    frame = encode_frame({"type": "progress", "pad": "x" * 200})
    reader = FrameReader(np.dtype("<i2"), expected_n=3, max_header_bytes=100, bound="CLGATE_X")
    reader.feed(frame)
    with pytest.raises(ProtocolError, match=r"header of 2\d\d bytes \(at most 100 bytes: CLGATE_X\)"):
        reader.next_frame()
    roomy = FrameReader(np.dtype("<i2"), expected_n=3, max_header_bytes=1 << 40, bound="CLGATE_X")
    assert roomy.max_header_bytes == MAX_HEADER_BYTES  # never above the protocol's own bound
    roomy.feed(frame)
    assert roomy.next_frame()[0]["pad"] == "x" * 200


def test_prediction_range():
    check_predictions(np.array([-1, 0, 5]), 6)
    for bad in ([6], [-2], [0, 32767]):
        with pytest.raises(ProtocolError, match="out of range"):
            check_predictions(np.array(bad), 6)


def test_the_child_prints_never_reach_the_protocol(tmp_path, synthetic_spec):
    """A model that prints (to standard output) does not corrupt the frames."""
    source = (
        "import builtins, sys, clgate.engine.training as t\n"
        "real = t.HeldoutPredictor.predict\n"
        "def predict(self, fn, model):\n"
        "    print('hello from the model')\n"
        "    sys.stdout.write('\\x00\\x00\\x00\\x05{}{}{}'); sys.stdout.flush()\n"
        "    return real(self, fn, model)\n"
        "t.HeldoutPredictor.predict = predict\n"
        "import clgate.engine.child as c; sys.argv[0] = 'child'; sys.exit(c.main(sys.argv[1:]))\n"
    )
    honest = load_log(run_job(synthetic_spec(), tmp_path / "a")[0])
    printed = load_log(run_job(synthetic_spec(), tmp_path / "b", launcher=_plain_launcher(source))[0])
    assert printed.points == honest.points


# the real child, sending valid points past a log's bound, or writing a file of twice the bound
OVER_THE_BOUND = """
import os, sys
import clgate.engine.child as child
MODE, BOUND = {mode!r}, {bound}
real_send, real_run = child.PipeChannel.send, child._run
def send(self, header, payload=None):
    real_send(self, header, payload)
    if MODE == "points" and header["type"] == "point" and not header["task_end"] and header["iteration"] > 0:
        for k in range(2, 5000):
            real_send(self, {{**header, "iteration": header["iteration"] * k}}, payload)
def run(stage, out, *rest):
    if MODE == "file":
        with open(os.path.join(out, "big.bin"), "wb") as f:
            f.write(b"x" * 2 * BOUND)
    return real_run(stage, out, *rest)
child.PipeChannel.send, child._run = send, run
sys.argv[0] = "child"
sys.exit(child.main(sys.argv[1:]))
"""


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("points", r"seed 0: the evaluation log would exceed 65536 bytes \(CLGATE_SANDBOX_MAX_FILE_BYTES"),
        ("file", r"wrote 65536 bytes into 'big.bin' in its output folder, the most CLGATE_SANDBOX_MAX_FILE"),
    ],
)
def test_a_child_past_max_file_bytes_ends_the_job_naming_the_bound(tmp_path, synthetic_spec, mode, message):
    spec, bound = synthetic_spec(), 64 << 10
    out = tmp_path / "out"
    source = OVER_THE_BOUND.format(mode=mode, bound=bound)
    with pytest.raises(ProtocolError, match=message):
        run_job(spec, out, launcher=_plain_launcher(source), max_file_bytes=bound)
    log = load_log(out / "log-seed0.json")  # what the trusted side wrote, within the bound
    assert (out / "log-seed0.json").stat().st_size <= bound + 1024
    if mode == "points":  # the points that fit, as a partial log
        assert log.partial and len(log.points) > 100


def test_an_honest_child_under_a_small_max_file_bytes_runs_to_the_end(tmp_path, synthetic_spec):
    (path,) = run_job(synthetic_spec(), tmp_path / "out", max_file_bytes=64 << 10)
    assert not load_log(path).partial
