"""The confined side of a job: ``python -m clgate.workers.sandbox_child`` runs the engine on staged inputs.

Started by :mod:`clgate.workers.sandbox` once per job attempt, inside bubblewrap where available. It sees
only the job's staged inputs (read-only), its output folder and a control folder (read-only); it has no
database, broker, artifact store, network or credentials, so everything it tells the trusted side goes
through files in the output folder, and the trusted side validates all of them:

- ``logs/log-seed<N>.json`` — the evaluation logs the engine writes (partial ones on a stop);
- ``progress.json`` — the latest progress (rewritten atomically, about twice a second);
- ``result.json`` — ``{"stopped": bool}`` once the engine returned;
- ``error.json`` — ``{"kind": "input", "problems": [...]}`` for bad input (a model refused, a data file
  that cannot be read …) or ``{"kind": "error", "type": ..., "message": ...}`` for anything else.

Stopping: the trusted side creates ``<control>/stop``; the engine polls it after every update and
writes the log so far as a partial log. A model that never returns is killed from outside.

The limits (:func:`apply_limits`) are set here, before any submitted file is opened, with soft and hard
values equal, so that nothing running later in this process (it has no capabilities) can raise them.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from clgate.schemas.errors import InputError
from clgate.workers import core

PROGRESS_EVERY_S = 0.5


def apply_limits(limits: dict[str, int]) -> None:
    """Set each ``RLIMIT_<NAME>`` in ``limits`` (soft = hard; 0 or absent: left as it is)."""
    for name, value in limits.items():
        if value and value > 0:
            which = getattr(resource, f"RLIMIT_{name.upper()}")
            resource.setrlimit(which, (value, value))


def die_with_parent(parent_pid: int) -> None:
    """Unconfined mode: be killed when the worker process dies (bwrap does this itself otherwise)."""
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # it died before the request took effect
        os._exit(1)


def _write_json(path: Path, document: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(document), encoding="utf-8")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="clgate.workers.sandbox_child")
    parser.add_argument("spec", type=Path, help="the job spec (JSON), paths relative to --inputs")
    parser.add_argument("out", type=Path, help="the output folder (logs, progress, result, error)")
    parser.add_argument("--inputs", type=Path, required=True)
    parser.add_argument("--control", type=Path, required=True)
    parser.add_argument("--limits", default="{}", help="JSON {name: value} of RLIMIT_* to set")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--parent-pid", type=int, default=0, help="die with this process (unconfined mode)")
    args = parser.parse_args(argv)
    if args.parent_pid:
        die_with_parent(args.parent_pid)
    apply_limits(json.loads(args.limits))
    out: Path = args.out
    try:
        stopped = _run(args.spec, out, inputs=args.inputs, control=args.control, threads=args.threads)
    except Exception as exc:
        if isinstance(exc, InputError):
            _write_json(out / "error.json", {"kind": "input", "problems": exc.problems})
            return 3
        traceback.print_exc()
        _write_json(out / "error.json", {"kind": "error", "type": type(exc).__name__, "message": str(exc)})
        return 4
    _write_json(out / "result.json", {"stopped": stopped})
    return 0


def _run(spec_path: Path, out: Path, *, inputs: Path, control: Path, threads: int) -> bool:
    import torch

    torch.set_num_threads(max(1, threads))
    spec = core.parse_job_spec(json.loads(spec_path.read_text(encoding="utf-8")))
    if spec.cpu_threads == 0 or spec.cpu_threads > threads:  # the job may ask for fewer, never more
        spec = spec.model_copy(update={"cpu_threads": threads})
    stop_file = control / "stop"
    last = {"progress": 0.0}

    def progress(p: Any) -> None:
        now = time.monotonic()
        if now - last["progress"] >= PROGRESS_EVERY_S or p.iteration == p.total_iterations:
            last["progress"] = now
            _write_json(out / "progress.json", core.progress_dict(p))

    def should_stop() -> bool:
        return stop_file.exists()

    logs = out / "logs"
    logs.mkdir(exist_ok=True)
    _, stopped = core.run_engine(spec, logs, progress=progress, should_stop=should_stop, base_dir=inputs)
    return stopped


if __name__ == "__main__":
    sys.exit(main())
