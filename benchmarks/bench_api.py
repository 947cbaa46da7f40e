"""Benchmark of the clgate service on loopback (SQLite): API throughput and latency with 1 and 2 API
processes, and the service's overhead on one digits job against running the same job directly.

    .venv/bin/python benchmarks/bench_api.py [--clients 8] [--seconds 10] [--max-requests 5000]
        [--levels 8,64,200] [--processes 1,2] [--generators 2] [--skip-digits] [--skip-single]

0. ``clgate serve --workers N`` (Celery mode: a redis-server started here, no Celery worker, so the
   submitted jobs stay queued and only the API is measured) for N in ``--processes``; at 8, 64 and 200
   concurrent clients (``--levels``): reads only (GET /v1/jobs/{id}), then metrics-only submissions only
   (POST /v1/jobs): requests/s, p50, p99 and errors per level. Goals: read p99 < 50 ms at 8 clients,
   throughput at 200 clients not below that at 64, zero errors. Skipped without redis-server.

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
The clients run in ``--generators`` load-generator processes of their own (asyncio, one connection per
client), never as threads in the server's interpreter; they share the machine's cores with the server.
All ratios come from this one run. Loopback only; every loop is bounded in count and in time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
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


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) used so far by ``pid`` and its descendants (Linux /proc; NaN elsewhere):
    the server's cost per request, which other work on a shared machine does not inflate as it does
    latency."""
    try:
        tick = os.sysconf("SC_CLK_TCK")
        parents = {}
        times = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                parents[int(entry.name)] = int(fields[1])
                times[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick
    except OSError:
        return float("nan")
    tree, grew = {pid}, True
    while grew:
        more = {child for child, parent in parents.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    return sum(times.get(p, 0.0) for p in tree)


def _wait_ready(proc: subprocess.Popen, url: str, log: Path) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("API did not start:\n" + log.read_text()[-2000:])


def _spawn(argv: list[str], data_dir: Path, log: Path, **env_extra: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLGATE_")}
    env.update(
        CLGATE_DATA_DIR=str(data_dir), CLGATE_BOOTSTRAP_ADMIN_KEY=ADMIN_KEY, PYTHONUNBUFFERED="1", **env_extra
    )
    with open(log, "wb") as out:  # the child keeps its own descriptor
        return subprocess.Popen(
            argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=out, start_new_session=True
        )


def start_api(data_dir: Path) -> tuple[subprocess.Popen, str]:
    """The API in embedded mode (one process, jobs run beside it), under uvicorn directly."""
    port = free_port()
    log = data_dir.parent / "api.log"
    argv = [sys.executable, "-m", "uvicorn", "--factory", "clgate.service.app:create_app"]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning", "--no-access-log"]
    proc = _spawn(argv, data_dir, log)
    url = f"http://127.0.0.1:{port}"
    _wait_ready(proc, url, log)
    return proc, url


def start_serve(data_dir: Path, *, processes: int, broker_url: str) -> tuple[subprocess.Popen, str]:
    """``clgate serve --workers processes`` in Celery mode (``broker_url``) on a SQLite store."""
    port = free_port()
    log = data_dir.parent / f"serve-{processes}.log"
    argv = [sys.executable, "-m", "clgate", "serve", "--port", str(port), "--workers", str(processes)]
    argv += ["--log-level", "warning", "--no-access-log"]
    proc = _spawn(argv, data_dir, log, CLGATE_BROKER_URL=broker_url)
    url = f"http://127.0.0.1:{port}"
    _wait_ready(proc, url, log)
    return proc, url


def start_redis(workdir: Path) -> tuple[subprocess.Popen, str] | None:
    """A redis-server on a free loopback port without persistence, or None when none is installed."""
    binary = shutil.which("redis-server")
    if binary is None:
        return None
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    proc = subprocess.Popen(argv, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return proc, f"redis://127.0.0.1:{port}/0"
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("redis-server did not start")


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the process group (``clgate serve`` and its API processes), then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig) if sig == signal.SIGKILL else proc.send_signal(sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            continue


def wait_job(client: httpx.Client, job_id: str, timeout: float = 600) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["state"] in ("succeeded", "failed", "cancelled"):
            return job
        time.sleep(0.05)
    raise TimeoutError(job_id)


def _request(rng: random.Random, job_ids: list[str], log_ref: str, write_share: float):
    """(is a write, method, path, JSON body) of one request of the mix."""
    if rng.random() < write_share:
        body = {
            "mode": "metrics",
            "model_name": "bench",
            "logs": [log_ref],
            "policy": {"name": "digits-release", "version": "1"},
            "baseline": "none",
        }
        return True, "POST", "/v1/jobs", body
    return False, "GET", f"/v1/jobs/{rng.choice(job_ids)}", None


async def _generate(
    url: str,
    clients: int,
    start_at: float,
    seconds: float,
    budget: int,
    job_ids: list[str],
    log_ref: str,
    write_share: float,
    seed: int,
) -> dict:
    """``clients`` concurrent clients (one connection each), each connected first; they start together at
    ``start_at`` (wall clock, shared by the generator processes) or, when connecting took longer, once all
    of this process's are connected, and run for ``seconds`` or ``budget`` requests, whichever ends first."""
    import asyncio

    reads: list[float] = []
    writes: list[float] = []
    errors: list[str] = []
    left = [budget]
    connected = 0
    go = asyncio.Event()
    window: list[float] = []

    async def client_loop(i: int) -> None:
        nonlocal connected
        rng = random.Random(seed * 100_003 + i)
        async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": ADMIN_KEY}, timeout=60) as c:
            await c.get("/healthz")  # the connection is open before the clock starts
            connected += 1
            if connected == clients:
                await asyncio.sleep(max(0.0, start_at - time.time()))
                window.extend([time.time(), time.time() + seconds])
                go.set()
            await go.wait()
            while time.time() < window[1] and left[0] > 0:
                left[0] -= 1
                write, method, path, body = _request(rng, job_ids, log_ref, write_share)
                t0 = time.perf_counter()
                try:
                    r = await c.request(method, path, json=body)
                    ok, detail = r.status_code in (200, 202), f"{r.status_code} {r.text[:100]}"
                except httpx.HTTPError as exc:
                    ok, detail = False, repr(exc)
                (writes if write else reads).append(time.perf_counter() - t0)
                if not ok:
                    errors.append(detail)

    await asyncio.gather(*(client_loop(i) for i in range(clients)))
    return {"reads": reads, "writes": writes, "errors": errors, "begin": window[0], "end": time.time()}


def _generator(args: tuple) -> dict:
    """One load-generator process's share of a phase (runs in a process of the pool, not the server's)."""
    import asyncio

    return asyncio.run(_generate(*args))


def load(
    url: str,
    *,
    clients: int,
    seconds: float,
    max_requests: int,
    job_ids: list[str],
    log_ref: str,
    write_share: float,
    pool,
    generators: int,
) -> dict:
    """One phase: ``clients`` spread over ``generators`` processes of ``pool``; latencies, errors, and the
    elapsed time from the common start to the last generator's end."""
    n = max(1, min(generators, clients))
    share = [clients // n + (1 if i < clients % n else 0) for i in range(n)]
    start_at = time.time() + 1.0 + 0.01 * clients  # time for every client to connect first
    work = [
        (url, k, start_at, seconds, max(1, max_requests * k // clients), job_ids, log_ref, write_share, i)
        for i, k in enumerate(share)
    ]
    parts = pool.map_async(_generator, work).get(timeout=seconds + 300)
    return {
        "reads": [t for p in parts for t in p["reads"]],
        "writes": [t for p in parts for t in p["writes"]],
        "errors": [e for p in parts for e in p["errors"]],
        "elapsed": max(p["end"] for p in parts) - min(p["begin"] for p in parts),
    }


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


METRICS_JOB = {
    "mode": "metrics",
    "model_name": "bench",
    "policy": {"name": "digits-release", "version": "1"},
    "baseline": "none",
}


def prepare(url: str) -> tuple[httpx.Client, str]:
    """An admin client of the API at ``url``, with the benchmark's policy stored and its log uploaded."""
    import yaml

    c = httpx.Client(base_url=url, headers={"X-API-Key": ADMIN_KEY}, timeout=30)
    c.post("/v1/policies", json=yaml.safe_load(POLICY.read_text())).raise_for_status()
    log_ref = c.post("/v1/artifacts", params={"kind": "log"}, content=LOG.read_bytes()).json()["ref"]
    return c, log_ref


def by_processes(tmp: Path, args, levels: list[int], pool) -> dict:
    """Section 0: reads only, then submissions only, at each level, for each number of API processes."""
    redis = start_redis(tmp / "redis")
    if redis is None:
        print("no redis-server: the 1- and 2-process comparison (Celery mode) is skipped", flush=True)
        return {}
    results = {}
    try:
        for procs in [int(n) for n in args.processes.split(",") if n.strip()]:
            (tmp / f"serve-{procs}").mkdir()
            proc, url = start_serve(tmp / f"serve-{procs}" / "data", processes=procs, broker_url=redis[1])
            try:
                c, log_ref = prepare(url)
                for _ in range(5):  # jobs to read (queued: no Celery worker runs here)
                    c.post("/v1/jobs", json={**METRICS_JOB, "logs": [log_ref]}).raise_for_status()
                job_ids = [j["id"] for j in c.get("/v1/jobs").json()["data"]]
                c.close()
                for n in levels:
                    for kind, share in (("reads", 0.0), ("submissions", 1.0)):
                        before = cpu_seconds(proc.pid)
                        results[(procs, n, kind)] = load(
                            url,
                            clients=n,
                            seconds=args.seconds,
                            max_requests=args.max_requests,
                            job_ids=job_ids,
                            log_ref=log_ref,
                            write_share=share,
                            pool=pool,
                            generators=args.generators,
                        )
                        results[(procs, n, kind)]["cpu"] = cpu_seconds(proc.pid) - before
                        print(f"  done: {procs} API process(es), {n} clients, {kind}", flush=True)
            finally:
                stop(proc)
    finally:
        stop(redis[0])
    return results


def print_levels(results: dict) -> None:
    ms = 1000.0
    print(
        f"{'API procs':>9} {'clients':>8} {'kind':<12} {'requests':>8} {'req/s':>8} {'p50 ms':>8} "
        f"{'p99 ms':>8} {'errors':>7} {'server CPU ms/req':>17}"
    )
    rate = {}
    for (procs, n, kind), result in results.items():
        times = result["reads"] + result["writes"]
        rate[(procs, n, kind)] = len(times) / result["elapsed"]
        print(
            f"{procs:>9} {n:>8} {kind:<12} {len(times):>8} {rate[(procs, n, kind)]:>8.1f} "
            f"{pct(times, 0.5) * ms:>8.1f} {pct(times, 0.99) * ms:>8.1f} {len(result['errors']):>7} "
            f"{result['cpu'] / max(1, len(times)) * ms:>17.2f}"
            + (f"  e.g. {result['errors'][0]}" if result["errors"] else "")
        )
    for procs in sorted({k[0] for k in results}):
        eight = results.get((procs, 8, "reads"))
        if eight is not None:
            p99 = pct(eight["reads"], 0.99) * ms
            print(f"{procs} API process(es): read p99 at 8 clients {p99:.1f} ms (goal < 50 ms)")
        for kind in ("reads", "submissions"):
            if (procs, 64, kind) in rate and (procs, 200, kind) in rate:
                ratio = rate[(procs, 200, kind)] / rate[(procs, 64, kind)]
                print(f"{procs} API process(es): {kind} req/s at 200 / at 64 clients {ratio:.3f} (goal >= 1)")
        errors = sum(len(r["errors"]) for k, r in results.items() if k[0] == procs)
        print(f"{procs} API process(es): errors {errors} (goal 0)")
    procs = sorted({k[0] for k in results})
    if len(procs) > 1:
        for n in sorted({k[1] for k in results}):
            if rate.get((procs[0], n, "reads")) and (procs[-1], n, "reads") in rate:
                ratio = rate[(procs[-1], n, "reads")] / rate[(procs[0], n, "reads")]
                print(f"reads req/s, {procs[-1]} / {procs[0]} API processes at {n} clients: {ratio:.3f}")


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
        "--processes", default="1,2", help="API processes (clgate serve --workers) to compare"
    )
    parser.add_argument("--generators", type=int, default=2, help="load-generator processes")
    parser.add_argument(
        "--skip-digits", action="store_true", help="only the load phases (no digits job timing)"
    )
    parser.add_argument(
        "--skip-embedded",
        action="store_true",
        help="only section 0 (no embedded-mode load phase, no digits job)",
    )
    args = parser.parse_args()
    levels = [int(n) for n in args.levels.split(",") if n.strip()]
    import multiprocessing

    tmp = Path(tempfile.mkdtemp(prefix="clgate-bench-"))
    try:
        with multiprocessing.get_context("spawn").Pool(args.generators) as pool:
            by_level = by_processes(tmp, args, levels, pool)
            if not args.skip_embedded:
                embedded(tmp, args, pool)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if by_level:
        print()
        print_levels(by_level)


def embedded(tmp: Path, args, pool) -> None:
    """Sections 1 and 2: the embedded mode's mixed load, and the digits job against the direct commands."""
    import yaml

    spec = yaml.safe_load(JOB.read_text())
    spec.update({k: ({**spec.get(k, {}), **v} if isinstance(v, dict) else v) for k, v in OVERRIDES.items()})
    spec_path = tmp / "job.json"
    spec_path.write_text(json.dumps(spec))
    proc, url = start_api(tmp / "data")
    try:
        c, log_ref = prepare(url)

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
                pool=pool,
                generators=args.generators,
            )
            for name, share in (("reads only", 0.0), ("90 % reads, 10 % submissions", 0.1))
        }
        queued = c.get("/v1/jobs", params={"mode": "metrics", "limit": 1}).json()["count"]
        c.close()
    finally:
        stop(proc)

    ms = 1000.0
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
