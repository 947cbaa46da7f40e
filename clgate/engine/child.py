"""The process that runs submitted code: ``python -m clgate.engine.child STAGE OUT``.

Started by the trusted side of a job (:func:`clgate.engine.run_job`), as a plain subprocess or inside
bubblewrap (:mod:`clgate.workers.sandbox`). It reads only the stage folder that
:mod:`clgate.engine.staging` wrote (training samples with labels, held-out inputs without), may write
only into ``OUT`` (the final model), and talks to the trusted side through :mod:`clgate.engine.protocol`
frames on its standard output; its own prints, and those of the model, go to standard error. It stops
when a ``stop`` frame arrives on its standard input. It counts nothing and writes no log: whatever it
sends is checked by the trusted side, which holds the labels.

The resource limits (``--limits``) are set first, before any submitted file is opened, with soft and
hard values equal, so that nothing running later in this process can raise them.

With ``--wait`` (a pre-started child of :mod:`clgate.workers.pool`) it sets its limits, imports torch
and the engine, sends one ``ready`` frame and blocks until one ``go`` frame arrives on its standard
input, naming the stage and output folders as it sees them; only then does it open them, run the one
job and exit. A child never runs a second job.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import select
import signal
import struct
import sys
import traceback
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

MESSAGE_LIMIT = 2000


def apply_limits(limits: dict[str, int]) -> None:
    """Set each ``RLIMIT_<NAME>`` in ``limits`` (soft = hard; 0 or absent: left as it is)."""
    for name, value in limits.items():
        if value and value > 0:
            which = getattr(resource, f"RLIMIT_{name.upper()}")
            resource.setrlimit(which, (value, value))


def die_with_parent(parent_pid: int) -> None:
    """Be killed when the trusted process dies (bubblewrap's ``--die-with-parent`` does this otherwise)."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # it died before the request took effect
        os._exit(1)


class PipeChannel:
    """Frames to the trusted side on ``out``; ``stop`` frames (or the pipe closing) from ``fd_in``."""

    def __init__(self, out: BinaryIO, fd_in: int) -> None:
        self.out = out
        self.fd_in = fd_in
        self.stop = False

    def send(self, header: dict[str, Any], payload: np.ndarray | None = None) -> None:
        # lazy: the child imports the engine only after its limits and stdout redirect are in place
        from clgate.engine.protocol import write_frame

        write_frame(self.out, header, payload)

    def stop_requested(self) -> bool:
        if not self.stop and select.select([self.fd_in], [], [], 0)[0]:
            self.stop = True  # any byte, or the end of the pipe, means stop
        return self.stop


GO_HEADER_LIMIT = 4096


def _read_exact(fd: int, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            raise EOFError("the trusted side closed the pipe before go")
        data += chunk
    return data


def await_go(protocol_out: BinaryIO, fd_in: int = 0) -> dict[str, Any]:
    """``--wait``: import what a job needs, say ``ready``, then block until the ``go`` frame (its header,
    with ``stage`` and ``out``). Raises ``EOFError`` when the pipe closes first (the pool shuts down)."""
    import torch  # noqa: F401 - imported now, while no job waits

    # lazy: torch — imported after the child's limits and stdout redirect are in place
    import clgate.engine.training  # noqa: F401
    from clgate.engine.protocol import write_frame

    write_frame(protocol_out, {"type": "ready"})
    (length,) = struct.unpack(">I", _read_exact(fd_in, 4))
    if length > GO_HEADER_LIMIT:
        raise EOFError(f"a go frame of {length} bytes")
    header = json.loads(_read_exact(fd_in, length))
    if not isinstance(header, dict) or header.get("type") != "go":
        raise EOFError("the first frame is not go")
    return header


def _run(stage: Path, out: Path, channel: PipeChannel, threads: int) -> None:
    import torch

    # lazy: torch — imported after the child's limits and stdout redirect are in place
    from clgate.engine.protocol import prediction_dtype
    from clgate.engine.staging import load_staged
    from clgate.engine.training import ChildJob

    spec, data = load_staged(stage)
    if threads and (spec.cpu_threads == 0 or spec.cpu_threads > threads):  # fewer than allowed, never more
        spec = spec.model_copy(update={"cpu_threads": threads})
    if spec.cpu_threads:
        torch.set_num_threads(spec.cpu_threads)
    job = ChildJob(spec, data, channel, base_dir=stage, out_dir=out, dtype=prediction_dtype(data.n_classes))
    job.run()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="clgate.engine.child")
    parser.add_argument("stage", type=Path, help="the stage folder (spec.json, data.json, arrays, models/)")
    parser.add_argument("out", type=Path, help="the folder the final model is written to")
    parser.add_argument("--limits", default="{}", help="JSON {name: value} of RLIMIT_* to set")
    parser.add_argument(
        "--threads", type=int, default=0, help="at most this many CPU threads (0: the spec's)"
    )
    parser.add_argument("--parent-pid", type=int, default=0, help="die with this process")
    parser.add_argument("--wait", action="store_true", help="import, say ready, run after a go frame")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the trusted side's to handle
    if args.parent_pid:
        die_with_parent(args.parent_pid)
    apply_limits(json.loads(args.limits))
    protocol_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # prints (the model's too) go to standard error, never into the protocol
    sys.stdout = sys.stderr
    if args.wait:
        try:
            go = await_go(protocol_out)
        except (EOFError, ValueError):
            return 0  # not used for a job: nothing was opened
        args.stage, args.out = Path(str(go.get("stage", args.stage))), Path(str(go.get("out", args.out)))
        os.chdir(args.out)
    channel = PipeChannel(protocol_out, 0)
    # lazy: torch — imported after the child's limits and stdout redirect are in place
    from clgate.engine.errors import EngineInputError
    from clgate.engine.training import Diverged, Stopped

    try:
        _run(args.stage, args.out, channel, args.threads)
    except Stopped:
        channel.send({"type": "stopped"})
    except Diverged:
        return 5
    except EngineInputError as exc:
        _report(channel, "input", exc)
        return 3
    except Exception as exc:
        traceback.print_exc()
        _report(channel, "error", exc)
        return 4
    return 0


def _report(channel: PipeChannel, kind: str, exc: Exception) -> None:
    """Tell the trusted side why the child stops: ``kind`` (bad input or a failure), class, message."""
    message = str(exc)[:MESSAGE_LIMIT]
    channel.send({"type": "error", "kind": kind, "class": type(exc).__name__, "message": message})


if __name__ == "__main__":
    sys.exit(main())
