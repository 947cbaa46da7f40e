"""The child's side of a job: continual retraining (or checkpoint loading) and prediction.

This runs in the process that runs submitted code (:mod:`clgate.engine.child`). It never sees a
held-out label and never counts: at every evaluation point it predicts a class for every staged
held-out input and hands the array to a :class:`Channel`, which sends it to the trusted side
(:mod:`clgate.engine.trusted`), where counting, the evaluation log and everything after it happen.

Iterations count optimizer updates. A point comes every ``eval_every`` updates, at every task end
(``task_end: true``) and, with ``before_first_update``, at iteration 0. With ``first_task_learned``
the first task is not trained: its task-end point is at iteration 0. The channel's ``stop_requested``
is polled after every update.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from clgate.engine.data import model_input
from clgate.engine.errors import EngineInputError, ModelError
from clgate.engine.evaluator import auto_batch_size
from clgate.engine.models import (
    apply_weights,
    build_model,
    check_output_width,
    grow_head,
    inspect_model_file,
    load_exported,
    load_model,
    load_state_dict_file,
    load_torchscript,
    make_growing_head,
)
from clgate.engine.resources import SampleCost, count_params, measure_costs
from clgate.engine.samples import Samples, iterate_batches
from clgate.engine.schedule import batch_plan, plan_checkpoints, resolve_device
from clgate.engine.staging import StagedData
from clgate.engine.strategies import StrategyContext, create_strategy
from clgate.schemas.job import JobSpec

PROGRESS_INTERVAL_S = 0.2


class Channel(Protocol):
    """Where the child's messages go (the trusted side, in :mod:`clgate.engine.child` a pipe)."""

    def send(self, header: dict[str, Any], payload: np.ndarray | None = None) -> None: ...

    def stop_requested(self) -> bool: ...


class Stopped(Exception):
    """The trusted side asked the run to stop."""


class Diverged(Exception):
    """Training produced a non-finite loss or weights; ``args``: (task, iteration, reason)."""


class HeldoutPredictor:
    """The staged held-out inputs, resident on ``device`` in stored dtype, and the class each gets.

    :meth:`predict` runs a few large batches under ``torch.inference_mode()`` (the model's train/eval
    mode restored afterwards, nothing random drawn) and returns one class index per sample — the
    argmax of the logits ``predict`` returns, ``-1`` where a logit is NaN or +inf (a broken output is a
    wrong prediction, never "class 0") — in one transfer to the host.
    """

    def __init__(
        self,
        x: np.ndarray,
        *,
        device: torch.device,
        dtype: np.dtype,
        batch_size: int | None = None,
        autocast: Callable[[], AbstractContextManager[Any]] = nullcontext,
    ) -> None:
        self.x = torch.from_numpy(np.ascontiguousarray(x)).to(device)
        self.batch_size = batch_size or auto_batch_size(tuple(x.shape[1:]), device)
        self.autocast = autocast
        self.dtype = np.dtype(dtype)
        torch_dtype = torch.int16 if self.dtype.itemsize == 2 else torch.int32
        self._out = torch.empty(len(self.x), dtype=torch_dtype, device=device)

    def predict(self, predict: Callable[[torch.Tensor], torch.Tensor], model: torch.nn.Module) -> np.ndarray:
        out = self._out
        was_training = model.training
        model.eval()
        try:
            with torch.inference_mode(), self.autocast():
                for start in range(0, len(self.x), self.batch_size):
                    logits = predict(model_input(self.x[start : start + self.batch_size]))
                    # the row's max is NaN when a logit is NaN and +inf when one is +inf: both broken
                    best, index = logits.max(dim=1)
                    out[start : start + len(logits)] = index.masked_fill_(~(best < math.inf), -1)
        finally:
            model.train(was_training)
        return out.cpu().numpy().astype(self.dtype, copy=False)


class ChildJob:
    """Every seed of a job, in the child: the shared data and device, one :class:`SeedRun` per seed."""

    def __init__(
        self,
        spec: JobSpec,
        data: StagedData,
        channel: Channel,
        *,
        base_dir: Path,
        out_dir: Path,
        dtype: np.dtype,
    ) -> None:
        self.spec, self.data, self.channel = spec, data, channel
        self.base_dir, self.out_dir = base_dir, out_dir
        self.device = resolve_device(spec.device)
        use_bf16 = spec.training.precision == "bf16" and self.device.type == "cuda"
        self.precision = "bf16" if use_bf16 else "fp32"
        self.autocast: Callable[[], Any] = (
            (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if use_bf16 else nullcontext
        )
        self.train = Samples(data.x_train, data.y_train)
        if data.train_task is None:  # NC: a task is its classes' samples
            self.task_samples = [self.train.where_label(classes) for classes in data.tasks]
        else:  # NI/NIC: a task is its sample group's samples of the classes it brings
            task_of = np.asarray(data.train_task)
            self.task_samples = [
                Samples(data.x_train, data.y_train, np.flatnonzero(task_of == k))
                for k in range(len(data.tasks))
            ]
        self.predictor = HeldoutPredictor(
            data.heldout_x,
            device=self.device,
            dtype=dtype,
            batch_size=spec.evaluation.batch_size,
            autocast=self.autocast,
        )

    def example(self) -> torch.Tensor:
        """Two training samples as model input on the device (cost counting)."""
        x, _ = self.train.take([0, 1] if len(self.train) > 1 else [0])
        return model_input(x.to(self.device))

    def run(self) -> None:
        cpu_threads = torch.get_num_threads() if self.device.type == "cpu" else None
        self.channel.send(
            {
                "type": "hello",
                "device": str(self.device),
                "cpu_threads": cpu_threads,
                "precision": self.precision,
            }
        )
        for index, seed in enumerate(self.spec.seeds):
            SeedRun(self, seed, index).run()


class SeedRun:
    """One seed's run: train (or load checkpoints), predict at every point, report to the channel."""

    def __init__(self, job: ChildJob, seed: int, seed_index: int) -> None:
        self.job, self.spec, self.channel = job, job.spec, job.channel
        self.seed, self.seed_index = seed, seed_index
        self.tasks = job.data.tasks
        self.n_classes = job.data.n_classes
        self.device = job.device
        self.autocast = job.autocast
        self.batchnorm = False
        self.iteration = 0
        self.total_iterations = 0
        self.task = 1
        self.last_progress = 0.0
        self.workers: int | None = getattr(self.spec.data, "workers", None)

    # ---------------------------------------------------------------- messages
    def _send(self, header: dict[str, Any], payload: np.ndarray | None = None) -> None:
        self.channel.send({**header, "seed": self.seed}, payload)

    def _report(self) -> None:
        now = time.monotonic()
        if now - self.last_progress < PROGRESS_INTERVAL_S:
            return
        self.last_progress = now
        self._send(
            {
                "type": "progress",
                "task": self.task,
                "iteration": self.iteration,
                "total_iterations": self.total_iterations,
            }
        )

    def _check_weights(self, model: torch.nn.Module, *, task: int, iteration: int) -> None:
        """Non-finite weights stop the run (checked before every evaluation: cheap at that rate)."""
        bad = [name for name, p in model.named_parameters() if not bool(torch.isfinite(p).all())]
        if bad:
            more = f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""
            raise Diverged(task, iteration, f"weights are not finite: {bad[0]}{more}")

    def _point(
        self, model: torch.nn.Module, predict: Callable, *, iteration: int, task: int, task_end: bool
    ) -> None:
        if self.spec.mode == "retrain":
            self._check_weights(model, task=task, iteration=iteration)
        preds = self.job.predictor.predict(predict, model)
        self._send({"type": "point", "iteration": iteration, "task": task, "task_end": task_end}, preds)
        self.last_progress = time.monotonic()

    def _stop_check(self) -> None:
        if self.channel.stop_requested():
            raise Stopped

    # ---------------------------------------------------------------- run
    def run(self) -> None:
        try:
            if self.spec.mode == "evaluate":
                self._run_evaluate()
            else:
                self._run_retrain()
        except Diverged as exc:
            task, iteration, reason = exc.args
            self._send({"type": "diverged", "task": task, "iteration": iteration, "reason": reason})
            raise

    def _load(self) -> tuple[torch.nn.Module, dict[str, Any]]:
        spec, base = self.spec, self.job.base_dir
        torch.manual_seed(self.seed)
        model, model_info = load_model(
            arch=spec.model.arch,
            weights=base / spec.model.weights if spec.model.weights else None,
            torchscript=base / spec.model.torchscript if spec.model.torchscript else None,
            input_shape=self.job.data.input_shape,
            n_classes=self.n_classes,
            hidden=spec.model.hidden,
        )
        if spec.model.head == "growing":
            make_growing_head(model, self.n_classes)
            model_info["head"] = "growing"
        model.to(self.device)
        model.train()
        self.batchnorm = _has_batchnorm(model)
        return model, model_info

    def _run_retrain(self) -> None:
        spec, job = self.spec, self.job
        model, model_info = self._load()
        ctx = StrategyContext(
            model=model,
            n_classes=self.n_classes,
            device=self.device,
            seed=self.seed,
            batch_size=spec.training.batch_size,
            predict_over=spec.model.predict_over,
            autocast=self.autocast,
        )
        strategy, ignored = create_strategy(spec.strategy.name, spec.strategy.params, ctx)
        example = job.example()
        self.cost: SampleCost = measure_costs(model, example)
        self.generator = torch.Generator().manual_seed(self.seed)
        sizes = [len(t) for t in job.task_samples]
        learned_first = spec.scenario.first_task_learned
        self.planned = [
            0 if (k == 0 and learned_first) else self._iterations_for(strategy.expected_train_size(k, sizes))
            for k in range(len(self.tasks))
        ]
        self.total_iterations = sum(self.planned)
        meta = {
            "strategy": strategy.name,
            "strategy_params": strategy.params.model_dump(),
            **({"ignored_strategy_params": ignored} if ignored else {}),
            **model_info,
            "training": spec.training.model_dump(),
            "muladds_per_sample": {"forward": self.cost.forward_muladds, "train": self.cost.train_muladds},
        }
        self._send({"type": "seed_start", "total_iterations": self.total_iterations, "meta": meta})
        for k, classes in enumerate(self.tasks):
            self.task = k + 1
            ctx.seen[torch.tensor(classes, device=self.device)] = True
            if grow_head(model, classes):  # a growing head: this task's rows, and its larger cost
                self.cost = measure_costs(model, example)
            self._task(k, model, strategy, strategy.predict, example)
            if k < len(self.tasks) - 1:
                self._stop_check()
        final = self._save_model(model) if spec.training.save_final else None
        self._send({"type": "seed_end", "final_model": final})

    def _task(
        self, k: int, model: torch.nn.Module, strategy: Any, predict: Callable, example: torch.Tensor
    ) -> None:
        spec = self.spec
        task = self.job.task_samples[k]
        start_iteration = self.iteration
        train_before = strategy.extra_train_samples
        forward_before = strategy.extra_forward_samples
        trained = 0
        if k == 0 and spec.scenario.first_task_learned:
            strategy.learned_task(k, task)
            self._point(model, predict, iteration=0, task=1, task_end=True)
        else:
            if k == 0 and spec.evaluation.before_first_update:
                self._point(model, predict, iteration=0, task=1, task_end=False)
            trained = self._train_task(k, model, strategy, predict, task)
        strategy.after_task(k, task)
        cost = self.cost
        extra_train = strategy.extra_train_samples - train_before
        extra_forward = strategy.extra_forward_samples - forward_before
        resources = {
            "task": k + 1,
            "model_params": count_params(model),
            "buffer_bytes": strategy.buffer_bytes(),
            "train_bytes": task.input_nbytes,
            "ops_train": (trained + extra_train) * cost.train_muladds + extra_forward * cost.forward_muladds,
            "ops_pass": len(task) * cost.train_muladds,
        }
        self._send(
            {
                "type": "task_done",
                "task": k + 1,
                "iterations": self.iteration - start_iteration,
                "resources": resources,
            }
        )

    def _train_task(
        self, k: int, model: torch.nn.Module, strategy: Any, predict: Callable, task: Samples
    ) -> int:
        """Train task ``k`` (points every ``eval_every`` updates and at its end); returns samples trained."""
        tr = self.spec.training
        strategy.before_task(k, task)
        train = strategy.task_data(k, task)
        n = len(train)
        if n == 1 and self.batchnorm:
            raise EngineInputError(
                f"task {k + 1}: one training sample; a model with BatchNorm cannot train on a batch of one"
            )
        steps_per_epoch = self._steps_per_epoch(n)
        n_iter = self._iterations_for(n)
        self.total_iterations += n_iter - self.planned[k]
        self.planned[k] = n_iter
        optimizer = _make_optimizer(model, tr)
        eval_every = self.spec.evaluation.eval_every
        plan = batch_plan(n, tr.batch_size, steps_per_epoch, n_iter, self.generator)
        trained = 0
        for it, (xb, yb) in enumerate(iterate_batches(train, plan, self.device, workers=self.workers)):
            with self.autocast():
                loss = strategy.loss(xb, yb)
            if not bool(torch.isfinite(loss)):
                raise Diverged(k + 1, self.iteration + 1, f"loss is {float(loss.detach())}")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            strategy.after_step(xb, yb, first_pass=it < steps_per_epoch)
            trained += len(yb)
            self.iteration += 1
            if eval_every and self.iteration % eval_every == 0 and it != n_iter - 1:
                self._point(model, predict, iteration=self.iteration, task=k + 1, task_end=False)
            else:
                self._report()
            self._stop_check()
        strategy.end_training(k, task)
        self._point(model, predict, iteration=self.iteration, task=k + 1, task_end=True)
        return trained

    def _save_model(self, model: torch.nn.Module) -> str:
        if isinstance(model, torch.jit.ScriptModule):
            target = self.job.out_dir / f"model-seed{self.seed}.pt"
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", category=DeprecationWarning)
                torch.jit.save(model, str(target))
        else:
            from safetensors.torch import save_file

            target = self.job.out_dir / f"model-seed{self.seed}.safetensors"
            save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}, str(target))
        return target.name

    def _steps_per_epoch(self, n: int) -> int:
        """Batches per epoch over ``n`` samples. A BatchNorm model in training mode cannot take a batch
        of one (the batch variance is undefined): the lone last sample joins the previous batch."""
        bs = self.spec.training.batch_size
        if self.batchnorm and n > 1 and n % bs == 1:
            return n // bs
        return math.ceil(n / bs)

    def _iterations_for(self, n: int) -> int:
        tr = self.spec.training
        if tr.iterations is not None:
            return tr.iterations
        return tr.epochs * self._steps_per_epoch(n)

    # ---------------------------------------------------------------- evaluate mode
    def _run_evaluate(self) -> None:
        spec = self.spec
        plan = plan_checkpoints(spec, len(self.tasks))
        self.total_iterations = plan[-1][1]
        self._send({"type": "seed_start", "total_iterations": self.total_iterations, "meta": {}})
        seen = torch.zeros(self.n_classes, dtype=torch.bool, device=self.device)
        mask_all = spec.model.predict_over == "all"
        for path_text, iteration, task, task_end in plan:
            model = self._load_checkpoint(self.job.base_dir / path_text)
            model.to(self.device)
            for classes in self.tasks[:task]:
                seen[torch.tensor(classes, device=self.device)] = True

            def predict(x: torch.Tensor, model: torch.nn.Module = model) -> torch.Tensor:
                out = model(x)
                return out if mask_all else out.masked_fill(~seen, float("-inf"))

            self.task = task
            self.iteration = iteration
            self._point(model, predict, iteration=iteration, task=task, task_end=task_end)
            self._stop_check()
        self._send({"type": "seed_end", "final_model": None})

    def _load_checkpoint(self, path: Path) -> torch.nn.Module:
        if not path.is_file():
            raise ModelError(f"{path}: no such checkpoint file")
        kind = inspect_model_file(path)
        shape = self.job.data.input_shape
        if kind == "torchscript":
            model = load_torchscript(path)
        elif kind == "export":
            model = load_exported(path)
        else:
            if self.spec.model.arch is None:
                raise ModelError(f"{path}: a weights file ({kind}) needs model.arch in the job spec")
            model = build_model(self.spec.model.arch, shape, self.n_classes, hidden=self.spec.model.hidden)
            if self.spec.model.head == "growing":  # its rows are rebuilt from the checkpoint's shapes
                make_growing_head(model, self.n_classes)
            apply_weights(model, load_state_dict_file(path), str(path))
        check_output_width(model, shape, self.n_classes, str(path))
        return model


def _has_batchnorm(model: torch.nn.Module) -> bool:
    """Whether ``model`` normalises over the batch in training mode (built-in or TorchScript)."""
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            return True
        if "BatchNorm" in str(getattr(m, "original_name", "")):
            return True
    return False


def _make_optimizer(model: torch.nn.Module, tr: Any) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    if tr.optimizer == "adam":
        return torch.optim.Adam(params, lr=tr.lr, weight_decay=tr.weight_decay)
    return torch.optim.SGD(params, lr=tr.lr, momentum=tr.momentum, weight_decay=tr.weight_decay)
