"""Benchmark: how fast a service job starts, and what a service job costs against `clgate gate --job`.

    .venv/bin/python benchmarks/bench_jobstart.py [--repeats 2] [--pools 0,1] [--skip-phases] [--celery]

The job is the shipped digits example (examples/jobs/digits-er.yaml on the CPU: split digits, 5 tasks,
ER). Its model runs confined (CLGATE_SANDBOX=bwrap) in the service; bubblewrap must work here.

1. Phases inside a worker process (this process, the engine already loaded, as in a worker that has
   run a job), for each pool size (CLGATE_SANDBOX_POOL): the job claimed, its inputs staged, the data
   loaded and the child's folder staged by the trusted side, the child launched, its first frame
   (``hello``: started, imports done, staged data loaded), its first evaluation point, the engine done,
   the gate done. Seconds from the start of ``execute_job``.
2. The service (``clgate serve`` on loopback, embedded executor, SQLite; with ``--celery`` also a
   redis-server and one ``clgate worker``), for each pool size: a job posted,
   then polled every 50 ms: seconds until it is ``running``, until its first reported iteration
   (``progress.iteration``), until its decision is stored. Then `clgate gate --job` (a fresh process:
   the same engine run and gate; its child unconfined, the command line's default) and the same with
   CLGATE_SANDBOX=bwrap, alternating with the service jobs. Ratios use the medians of this one run.

Goals: first reported iteration ≤ 2 s after submission; service / `clgate gate --job` ≤ 1.2.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import yaml

REPO = Path(__file__).resolve().parents[1]
ADMIN_KEY = "clg_00000000000000be_" + "b" * 43
POLICY = REPO / "examples" / "policies" / "digits-release.yaml"
JOB = REPO / "examples" / "jobs" / "digits-er.yaml"


def digits_spec() -> dict:
    spec = yaml.safe_load(JOB.read_text())
    spec["device"] = "cpu"
    return spec


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------------- 1. phases in a worker process
@contextlib.contextmanager
def timed(marks: dict[str, float], t0: list[float]) -> Iterator[None]:
    """Wrap the worker's and the engine's steps so that each records when it ended (first time only)."""
    from clgate.engine import trusted
    from clgate.workers import runner, sandbox

    originals = []

    def wrap(owner: object, name: str, label: str, *, at_start: bool = False) -> None:
        original = getattr(owner, name)

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            if at_start:
                marks.setdefault(label, time.perf_counter() - t0[0])
            result = original(*args, **kwargs)
            if not at_start:
                marks.setdefault(label, time.perf_counter() - t0[0])
            return result

        originals.append((owner, name, original))
        setattr(owner, name, wrapper)

    wrap(runner.records, "claim", "claimed")
    wrap(runner, "_stage_inputs", "inputs copied from the store")
    wrap(trusted, "stage_job", "data loaded, child's folder staged")
    wrap(sandbox.SandboxLauncher, "__call__", "child launched")
    wrap(trusted._Session, "_hello", "child's first frame (hello)", at_start=True)
    wrap(trusted._SeedLog, "point", "first evaluation point", at_start=True)
    wrap(runner.core, "run_engine", "engine done")
    wrap(runner.core, "gate", "gate done")
    try:
        yield
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)


def new_job(store, spec: dict) -> str:
    from clgate.store.db import session_scope
    from clgate.store.models import Job, Policy

    with session_scope(store.sessions) as s:
        document = yaml.safe_load(POLICY.read_text())
        policy = Policy(name=f"bench-{time.monotonic_ns()}", version="1", document=document, sha256="0" * 64)
        s.add(policy)
        s.flush()
        job = Job(
            mode="retrain", queue="cpu", model_name="bench", spec=spec, policy_id=policy.id, progress={}
        )
        s.add(job)
        s.flush()
        return str(job.id)


def phases(tmp: Path, pool_size: int, repeats: int) -> list[dict[str, float]]:
    """``repeats`` digits jobs run by ``execute_job`` in this process, with a pool of ``pool_size``."""
    from clgate.store.db import upgrade
    from clgate.store.settings import Settings
    from clgate.workers import pool, runner

    settings = Settings(data_dir=tmp / f"phases-{pool_size}", sandbox="bwrap", sandbox_pool=pool_size)
    settings.data_dir.mkdir(parents=True)
    upgrade(settings.resolved_database_url())
    store = runner.store_for(settings)
    pool.start(settings)
    runs = []
    try:
        for i in range(repeats + 1):  # the first one warms this process up (imports, first calls)
            if pool_size:
                wait_ready(pool.current(settings))
            job_id = new_job(store, digits_spec())
            marks: dict[str, float] = {}
            t0 = [time.perf_counter()]
            with timed(marks, t0):
                state = runner.execute_job(job_id, settings)
            marks["job done"] = time.perf_counter() - t0[0]
            if state != "succeeded":
                raise RuntimeError(f"phases job ended {state}")
            if i:
                runs.append(marks)
    finally:
        pool.stop()
    return runs


def wait_ready(children, timeout: float = 120.0) -> None:
    """Until the pool's children have said ready (between jobs a worker has that time; in the service
    the next job's wait for it is measured, not hidden)."""
    deadline = time.monotonic() + timeout
    for child in list(children.waiting):
        while not child.ready and time.monotonic() < deadline:
            children._is_ready(child)


# ---------------------------------------------------------------------- 2. the service
def start_api(data_dir: Path, pool_size: int, broker: str | None) -> tuple[list[subprocess.Popen], str]:
    """``clgate serve`` (embedded, or with ``broker`` a Celery API and one ``clgate worker``)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLGATE_")}
    env.update(
        CLGATE_DATA_DIR=str(data_dir),
        CLGATE_BOOTSTRAP_ADMIN_KEY=ADMIN_KEY,
        CLGATE_SANDBOX="bwrap",
        CLGATE_SANDBOX_POOL=str(pool_size),
        PYTHONUNBUFFERED="1",
    )
    if broker:
        env["CLGATE_BROKER_URL"] = broker
    data_dir.mkdir(parents=True)
    log_path = data_dir.parent / "service.log"
    log = open(log_path, "wb")  # noqa: SIM115 - the servers keep it
    serve = [sys.executable, "-m", "clgate", "serve", "--host", "127.0.0.1", "--port", str(port)]
    procs = [subprocess.Popen(serve, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=log)]
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                break
        time.sleep(0.1)
    else:
        stop(procs)
        raise RuntimeError("the API did not start:\n" + log_path.read_text()[-3000:])
    if broker:
        worker = [sys.executable, "-m", "clgate", "worker", "--queues", "gpu,cpu", "--concurrency", "1"]
        procs.append(subprocess.Popen(worker, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=log))
    return procs, url


def stop(procs: list[subprocess.Popen]) -> None:
    for proc in reversed(procs):
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)
        if proc.poll() is None:
            proc.kill()


@contextlib.contextmanager
def redis_server(tmp: Path) -> Iterator[str]:
    """A redis-server on a free loopback port, no persistence."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("--celery needs redis-server (Debian package redis-server)")
    port = free_port()
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    proc = subprocess.Popen([*argv, "--dir", str(tmp)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        stop([proc])


def service_job(client: httpx.Client, spec: dict) -> dict[str, float]:
    """Post one job and poll it: seconds to running, to the first reported iteration, to the decision."""
    body = {
        "mode": "retrain",
        "model_name": "bench",
        "spec": spec,
        "policy": {"name": "digits-release", "version": "1"},
    }
    t0 = time.perf_counter()
    job = client.post("/v1/jobs", json=body)
    job.raise_for_status()
    job_id = job.json()["id"]
    marks = {"accepted": time.perf_counter() - t0}
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}").json()
        now = time.perf_counter() - t0
        if job["state"] != "queued":
            marks.setdefault("running", now)
        if (job.get("progress") or {}).get("iteration") is not None:
            marks.setdefault("first iteration reported", now)
        if job["state"] in ("succeeded", "failed", "cancelled"):
            if job["state"] != "succeeded":
                raise RuntimeError(f"service job {job['state']}: {job.get('error')}")
            marks["decision stored"] = now
            marks.setdefault("first iteration reported", now)  # a job too short to report any
            return marks
        time.sleep(0.05)
    raise TimeoutError(job_id)


def gate_job(spec_path: Path, out: Path, *, sandbox: str) -> float:
    """Wall time of `clgate gate --job` in a fresh process (CLGATE_SANDBOX as given; "" unset)."""
    shutil.rmtree(out, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLGATE_")}
    if sandbox:
        env.update(CLGATE_SANDBOX=sandbox, CLGATE_DATA_DIR=str(out.parent / "gate-data"))
    argv = [sys.executable, "-m", "clgate", "gate", "--job", str(spec_path), "--policy", str(POLICY)]
    t0 = time.perf_counter()
    done = subprocess.run(
        [*argv, "--out", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    elapsed = time.perf_counter() - t0
    if done.returncode not in (0, 1):
        raise RuntimeError(f"clgate gate --job failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return elapsed


def service(tmp: Path, pool_size: int, repeats: int, spec_path: Path, broker: str | None) -> dict:
    spec = digits_spec()
    mode = "celery" if broker else "embedded"
    procs, url = start_api(tmp / f"service-{mode}-{pool_size}" / "data", pool_size, broker)
    times: dict[str, list[float]] = {}
    try:
        with httpx.Client(base_url=url, headers={"X-API-Key": ADMIN_KEY}, timeout=60) as client:
            client.post("/v1/policies", json=yaml.safe_load(POLICY.read_text())).raise_for_status()
            service_job(client, spec)  # warm-up: the executor's process has run a job
            for i in range(repeats):
                time.sleep(1.0)  # between jobs, as between submissions: the replacement child starts
                for name, value in service_job(client, spec).items():
                    times.setdefault(name, []).append(value)
                times.setdefault("clgate gate --job", []).append(
                    gate_job(spec_path, tmp / f"g{i}", sandbox="")
                )
                times.setdefault("clgate gate --job, bwrap", []).append(
                    gate_job(spec_path, tmp / f"b{i}", sandbox="bwrap")
                )
    finally:
        stop(procs)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="timed jobs per pool size (after a warm-up)")
    parser.add_argument("--pools", default="0,1", help="CLGATE_SANDBOX_POOL values to compare")
    parser.add_argument("--skip-phases", action="store_true", help="only the service timings")
    parser.add_argument("--skip-service", action="store_true", help="only the phases in a worker process")
    parser.add_argument(
        "--celery", action="store_true", help="the service in Celery mode (redis-server, one worker) too"
    )
    args = parser.parse_args()
    pools = [int(n) for n in args.pools.split(",") if n.strip()]
    tmp = Path(tempfile.mkdtemp(prefix="clgate-jobstart-"))
    spec_path = tmp / "job.yaml"
    spec_path.write_text(yaml.safe_dump(digits_spec()))
    median = statistics.median
    try:
        if not args.skip_phases:
            import torch  # noqa: F401 - a worker that has run a job has the engine loaded

            for size in pools:
                runs = phases(tmp, size, args.repeats)
                print(
                    f"\n1. phases in a worker process, CLGATE_SANDBOX_POOL={size} (s since execute_job, "
                    f"median of {len(runs)})",
                    flush=True,
                )
                for label in runs[0]:
                    print(f"  {label:<40} {median(r[label] for r in runs):7.2f}")
        results = {}
        modes = ["embedded", "celery"] if args.celery else ["embedded"]
        if not args.skip_service:
            for mode in modes:
                with redis_server(tmp) if mode == "celery" else contextlib.nullcontext(None) as broker:
                    for size in pools:
                        results[mode, size] = service(tmp, size, args.repeats, spec_path, broker)
                        print(
                            f"\n2. the service ({mode}), CLGATE_SANDBOX_POOL={size} (s since submission, "
                            f"median of {args.repeats})",
                            flush=True,
                        )
                        for label, values in results[mode, size].items():
                            listed = ", ".join(f"{v:.2f}" for v in values)
                            print(f"  {label:<40} {median(values):7.2f}   ({listed})")
        for (mode, size), times in results.items():
            service_s, gate_s = median(times["decision stored"]), median(times["clgate gate --job"])
            confined = median(times["clgate gate --job, bwrap"])
            first = median(times["first iteration reported"])
            print(f"\nratios, {mode}, CLGATE_SANDBOX_POOL={size}:")
            print(f"  first iteration reported / 2 s          {first / 2:7.3f}   (goal ≤ 1)")
            print(f"  service / clgate gate --job             {service_s / gate_s:7.3f}   (goal ≤ 1.2)")
            print(f"  service / clgate gate --job, bwrap      {service_s / confined:7.3f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
