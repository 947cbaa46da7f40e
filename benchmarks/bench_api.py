"""Benchmark of the clgate service on loopback (embedded mode, SQLite): API throughput and latency,
and the service's overhead on one digits job against running the same job directly.

    .venv/bin/python benchmarks/bench_api.py [--clients 8] [--seconds 10] [--max-requests 5000]
        [--levels 8,64,200] [--skip-digits]

0. At 8, 64 and 200 concurrent clients (``--levels``): reads only (GET /v1/jobs/{id}), then metrics-only
   submissions only (POST /v1/jobs): requests/s, p50, p99 and errors per level (goal: zero errors).

1. N concurrent clients for a bounded time (and a bounded number of requests), twice: reading job
   status only (GET /v1/jobs/{id}), then 90 % reads and 10 % metrics-only submissions (POST
   /v1/jobs, which the embedded executor then runs beside the API). Prints requests per second,
   p50/p99 latency for reads and writes, and errors. Goals: zero errors, read p99 < 50 ms.
2. One digits job (examples/jobs/digits-er.yaml: split digits, 5 tasks, ER, 5 epochs) submitted
   to the service, timed from submission until its decision is stored, against `clgate gate --job` (the
   same engine run and the
   same gate, in a fresh process) and `clgate run` (the engine alone). Each is run twice, alternating;
   the ratios use the medians. Each job runs in a fresh confined child process (the job sandbox), so
   the fair comparison is `clgate gate --job`; goal: service / `clgate gate --job` ≤ 1.05.
All ratios come from this one run. Loopback only; every loop is bounded in count and in time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from clgate.documents import load_log

REPO = Path(__file__).resolve().parents[1]
ADMIN_KEY = "clg_00000000000000be_" + "b" * 43
POLICY = REPO / "examples" / "policies" / "digits-release.yaml"
JOB = REPO / "examples" / "jobs" / "digits-er.yaml"
LOG = REPO / "examples" / "logs" / "spec-example.json"
OVERRIDES = {"device": "cpu"}  # the shipped example job as it is (5 epochs per task), on the CPU


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def start_api(data_dir: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLGATE_")}
    env.update(CLGATE_DATA_DIR=str(data_dir), CLGATE_BOOTSTRAP_ADMIN_KEY=ADMIN_KEY, PYTHONUNBUFFERED="1")
    with open(data_dir.parent / "api.log", "wb") as log:  # the child keeps its own descriptor
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "--factory",
                "clgate.service.app:create_app",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--log-level",
                "warning",
                "--no-access-log",
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("API did not start:\n" + (data_dir.parent / "api.log").read_text()[-2000:])


def wait_job(client: httpx.Client, job_id: str, timeout: float = 600) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["state"] in ("succeeded", "failed", "cancelled"):
            return job
        time.sleep(0.05)
    raise TimeoutError(job_id)


def load(
    url: str,
    *,
    clients: int,
    seconds: float,
    max_requests: int,
    job_ids: list[str],
    log_ref: str,
    write_share: float,
) -> dict:
    reads: list[float] = []
    writes: list[float] = []
    errors: list[str] = []
    budget = threading.Semaphore(max_requests)
    stop_at = time.monotonic() + seconds
    lock = threading.Lock()

    def client_loop(seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client(base_url=url, headers={"X-API-Key": ADMIN_KEY}, timeout=60) as c:
            while time.monotonic() < stop_at and budget.acquire(blocking=False):
                write = rng.random() < write_share
                t0 = time.perf_counter()
                try:
                    if write:
                        r = c.post(
                            "/v1/jobs",
                            json={
                                "mode": "metrics",
                                "model_name": "bench",
                                "logs": [log_ref],
                                "policy": {"name": "digits-release", "version": "1"},
                                "baseline": "none",
                            },
                        )
                    else:
                        r = c.get(f"/v1/jobs/{rng.choice(job_ids)}")
                    ok = r.status_code in (200, 202)
                    detail = f"{r.status_code} {r.text[:100]}"
                except httpx.HTTPError as exc:
                    ok, detail = False, repr(exc)
                dt = time.perf_counter() - t0
                with lock:
                    (writes if write else reads).append(dt)
                    if not ok:
                        errors.append(detail)

    threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=seconds + 30)
    elapsed = time.perf_counter() - t0
    return {"reads": reads, "writes": writes, "errors": errors, "elapsed": elapsed}


def direct_run(spec_path: Path, out: Path, *, gate: bool) -> float:
    """Wall time of ``clgate gate --job`` (engine + gate, what a service job does) or ``clgate run``
    (engine only)."""
    shutil.rmtree(out, ignore_errors=True)
    if gate:
        argv = ["gate", "--job", str(spec_path), "--policy", str(POLICY), "--out", str(out)]
    else:
        argv = ["run", str(spec_path), "--out", str(out), "--quiet"]
    t0 = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "clgate", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    elapsed = time.perf_counter() - t0
    if r.returncode not in (0, 1):  # PASS/WARN or FAIL are both a finished gate
        raise RuntimeError(f"clgate {argv[0]} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return elapsed


def direct_in_process(spec: dict, out: Path) -> float:
    """The same job through the library in this (warm) process: engine, then the gate with its reports."""
    import yaml

    from clgate.engine import run_job
    from clgate.gate import gate_logs
    from clgate.policy import parse_policy
    from clgate.schemas.job import JobSpec

    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    paths = run_job(JobSpec.parse(spec), out / "logs")
    gate_logs(
        [load_log(p) for p in paths],
        parse_policy(yaml.safe_load(POLICY.read_text())),
        out_dir=out / "gate",
    )
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--max-requests", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=2, help="digits jobs per side (service / direct)")
    parser.add_argument(
        "--levels",
        default="8,64,200",
        help="concurrent clients of the reads-only and submissions-only phases",
    )
    parser.add_argument(
        "--skip-digits", action="store_true", help="only the load phases (no digits job timing)"
    )
    args = parser.parse_args()
    levels = [int(n) for n in args.levels.split(",") if n.strip()]

    import yaml

    tmp = Path(tempfile.mkdtemp(prefix="clgate-bench-"))
    spec = yaml.safe_load(JOB.read_text())
    spec.update({k: ({**spec.get(k, {}), **v} if isinstance(v, dict) else v) for k, v in OVERRIDES.items()})
    spec_path = tmp / "job.json"
    spec_path.write_text(json.dumps(spec))
    proc, url = start_api(tmp / "data")
    try:
        c = httpx.Client(base_url=url, headers={"X-API-Key": ADMIN_KEY}, timeout=30)
        c.post("/v1/policies", json=yaml.safe_load(POLICY.read_text())).raise_for_status()
        log_ref = c.post("/v1/artifacts", params={"kind": "log"}, content=LOG.read_bytes()).json()["ref"]

        # ---- the service's overhead on one digits job, alternating with the direct command
        service_s, inside_s, direct_s, run_s, lib_s = [], [], [], [], []
        if args.skip_digits:
            args.repeats = 0
        else:
            direct_in_process(spec, tmp / "warm-up")  # imports, first-call costs: both sides measured warm
            warm = c.post(
                "/v1/jobs",
                json={
                    "mode": "retrain",
                    "model_name": "bench-digits",
                    "spec": spec,
                    "policy": {"name": "digits-release", "version": "1"},
                },
            ).json()
            wait_job(c, warm["id"])  # starts the embedded worker process and its imports
            for i in range(args.repeats):
                t0 = time.perf_counter()
                job = c.post(
                    "/v1/jobs",
                    json={
                        "mode": "retrain",
                        "model_name": "bench-digits",
                        "spec": spec,
                        "policy": {"name": "digits-release", "version": "1"},
                    },
                ).json()
                job = wait_job(c, job["id"])
                service_s.append(time.perf_counter() - t0)
                inside_s.append(job["duration_s"])
                assert job["state"] == "succeeded", job
                direct_s.append(direct_run(spec_path, tmp / f"direct-{i}", gate=True))
                run_s.append(direct_run(spec_path, tmp / f"run-{i}", gate=False))
                lib_s.append(direct_in_process(spec, tmp / f"lib-{i}"))
                print(
                    f"digits job {i + 1}: service {service_s[-1]:.2f} s (worker {inside_s[-1]:.2f} s), "
                    f"library in process {lib_s[-1]:.2f} s, clgate gate --job {direct_s[-1]:.2f} s, "
                    f"clgate run {run_s[-1]:.2f} s",
                    flush=True,
                )
        for _ in range(3):  # a few finished jobs to read
            wait_job(
                c,
                c.post(
                    "/v1/jobs",
                    json={
                        "mode": "metrics",
                        "model_name": "bench",
                        "logs": [log_ref],
                        "policy": {"name": "digits-release", "version": "1"},
                        "baseline": "none",
                    },
                ).json()["id"],
            )
        job_ids = [j["id"] for j in c.get("/v1/jobs").json()["data"]]

        # ---- concurrency levels: reads only, then submissions only, at each level
        by_level = {}
        for n in levels:
            for kind, share in (("reads", 0.0), ("submissions", 1.0)):
                by_level[(n, kind)] = load(
                    url,
                    clients=n,
                    seconds=args.seconds,
                    max_requests=min(args.max_requests, 5 * n if share else 20 * n),
                    job_ids=job_ids,
                    log_ref=log_ref,
                    write_share=share,
                )

        # ---- load: status reads only, then reads with 10 % metrics-only submissions (which then run)
        phases = {
            name: load(
                url,
                clients=args.clients,
                seconds=args.seconds,
                max_requests=args.max_requests,
                job_ids=job_ids,
                log_ref=log_ref,
                write_share=share,
            )
            for name, share in (("reads only", 0.0), ("90 % reads, 10 % submissions", 0.1))
        }
        queued = c.get("/v1/jobs", params={"mode": "metrics", "limit": 1}).json()["count"]
        c.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)

    ms = 1000.0
    print(
        f"{'clients':>8} {'kind':<12} {'requests':>8} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7}"
    )
    for (n, kind), result in by_level.items():
        times = result["reads"] + result["writes"]
        print(
            f"{n:>8} {kind:<12} {len(times):>8} {len(times) / result['elapsed']:>8.1f} "
            f"{pct(times, 0.5) * ms:>8.1f} {pct(times, 0.99) * ms:>8.1f} {len(result['errors']):>7}"
            + (f"  e.g. {result['errors'][0]}" if result["errors"] else "")
        )
    for name, result in phases.items():
        reads, writes, errors = result["reads"], result["writes"], result["errors"]
        total = len(reads) + len(writes)
        print()
        print(f"load, {name}: {args.clients} clients, {result['elapsed']:.1f} s, {total} requests")
        print(f"  throughput            {total / result['elapsed']:8.1f} req/s")
        print(
            f"  read  p50 / p99       {pct(reads, 0.5) * ms:8.2f} / {pct(reads, 0.99) * ms:.2f} ms  "
            " (goal p99 < 50 ms)"
        )
        if writes:
            print(f"  write p50 / p99       {pct(writes, 0.5) * ms:8.2f} / {pct(writes, 0.99) * ms:.2f} ms")
        print(
            f"  errors                {len(errors):8d}        (goal "
            f"0){'  e.g. ' + errors[0] if errors else ''}"
        )
        print(f"  ratio read p99 / 50 ms {pct(reads, 0.99) * ms / 50:7.3f}   (goal < 1)")
    print(f"metrics-only jobs stored by the load: {queued}")
    if not service_s:
        return
    svc, wrk, direct = statistics.median(service_s), statistics.median(inside_s), statistics.median(direct_s)
    run_only, lib = statistics.median(run_s), statistics.median(lib_s)
    print("digits job (examples/jobs/digits-er.yaml, CPU), medians of", args.repeats)
    print(f"  service, submit → decision stored   {svc:8.2f} s")
    print(f"  service, worker's own run time      {wrk:8.2f} s")
    print(f"  library in this process (warm)      {lib:8.2f} s   (run_job + gate_logs: the same work)")
    print(
        f"  clgate gate --job (fresh process)   {direct:8.2f} s   (the same work, plus start-up and imports)"
    )
    print(f"  clgate run (fresh process)          {run_only:8.2f} s   (engine only, no gate)")
    print(f"  ratio service / library (warm)      {svc / lib:8.3f}   (the job's confined child starts fresh)")
    print(f"  ratio service / clgate gate --job   {svc / direct:8.3f}")
    print(f"  ratio service / clgate run          {svc / run_only:8.3f}   (includes the gate and reports)")


if __name__ == "__main__":
    main()
