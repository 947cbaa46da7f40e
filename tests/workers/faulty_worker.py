"""A real Celery worker whose job code misbehaves, for the fault tests (run as a script).

``python faulty_worker.py <hostname> crash``: every job kills its own process (a job that crashes its
worker: out of memory, a segfault). ``… hang``: every job hangs and ignores the soft time limit (billiard's
SIGUSR1 blocked), so only the hard time limit ends it. Everything else is the real worker: the real
task, claim, heartbeats and records.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from clgate.workers import runner


def _misbehave(fault: str):
    def run(store, job_id, work, actor):
        if fault == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # billiard's soft time limit is ignored
        while True:
            time.sleep(0.5)

    return run


if __name__ == "__main__":
    hostname, fault = sys.argv[1], sys.argv[2]
    runner._run = _misbehave(fault)
    from clgate.workers.app import app

    app.worker_main(
        [
            "worker",
            "-Q",
            "gpu,cpu",
            "--concurrency",
            "1",
            "--loglevel",
            "info",
            "--hostname",
            hostname,
            "--pool",
            "prefork",
        ]
    )
