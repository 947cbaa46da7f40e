"""The store collector on a fresh registry (never the global one): names, units, bounded labels,
values equal to the stored records; and the alert rules with ``promtool``."""

from __future__ import annotations

import datetime as dt
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from clgate.service.metrics import StoreCollector
from clgate.store.db import make_engine, make_sessionmaker, session_scope, upgrade
from clgate.store.models import Decision, Job, Policy, WorkerHeartbeat, utcnow

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "rules.yml"
RULE_TESTS = REPO / "deploy" / "prometheus" / "rules_test.yml"


def _headline(mica: float, worst: list[tuple[str, float]], regression: float | None = None) -> dict:
    return {
        "acc": 0.9,
        "mica": mica,
        "wamica": mica + 0.05,
        "min_acc": 0.4,
        "min_class_acc": mica,
        "wc_acc": 0.5,
        "class_regression": regression,
        "class_regression_class": "dog" if regression is not None else None,
        "worst_classes": [{"id": i, "name": n, "accuracy": a} for i, (n, a) in enumerate(worst)],
    }


@pytest.fixture
def sessions(tmp_path):
    url = f"sqlite:///{tmp_path / 'c.db'}"
    upgrade(url)
    return make_sessionmaker(make_engine(url))


def _seed(sessions):
    t0 = utcnow() - dt.timedelta(hours=1)
    with session_scope(sessions) as s:
        p = Policy(name="p", version="1", document={}, sha256="0" * 64)
        s.add(p)
        s.flush()
        jobs = []
        for i, (mode, state, duration) in enumerate(
            [
                ("retrain", "succeeded", 42.0),
                ("retrain", "succeeded", 700.0),
                ("metrics", "succeeded", 0.5),
                ("retrain", "queued", None),
                ("metrics", "running", None),
                ("retrain", "failed", 3.0),
            ]
        ):
            queue = "gpu" if mode == "retrain" else "cpu"
            job = Job(
                mode=mode,
                queue=queue,
                model_name="alpha" if i != 2 else "beta",
                policy_id=p.id,
                state=state,
                progress={},
                duration_s=duration,
                created_at=t0 + dt.timedelta(minutes=i),
                started_at=t0 + dt.timedelta(minutes=i) if state == "running" else None,
            )
            s.add(job)
            jobs.append(job)
        s.flush()
        worst = [("cat", 0.2), ("dog", 0.1), ("fox", 0.5), ("owl", 0.7)]
        s.add(
            Decision(
                job_id=jobs[0].id,
                policy_id=p.id,
                model_name="alpha",
                verdict="PASS",
                created_at=t0,
                headline=_headline(0.8, worst),
                document={},
            )
        )
        s.add(
            Decision(
                job_id=jobs[2].id,
                policy_id=p.id,
                model_name="beta",
                verdict="WARN",
                created_at=t0,
                headline=_headline(0.6, [("x", 0.6)]),
                document={},
            )
        )
        s.add(
            Decision(
                job_id=jobs[1].id,
                policy_id=p.id,
                model_name="alpha",
                verdict="FAIL",
                created_at=t0 + dt.timedelta(minutes=5),
                headline=_headline(0.1, worst, 0.25),
                document={},
            )
        )
        s.add(WorkerHeartbeat(hostname="w1", queues="gpu", last_seen=utcnow()))
        s.add(WorkerHeartbeat(hostname="w2", queues="cpu,gpu", last_seen=utcnow() - dt.timedelta(hours=1)))


def test_collector_values_from_the_store(sessions):
    _seed(sessions)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(sessions, queue_lengths=lambda: {"gpu": 4, "cpu": 0}, worst_classes=3))
    v = registry.get_sample_value
    # latest decision per model wins
    assert v("clgate_model_mica_ratio", {"project": "default", "model": "alpha"}) == 0.1
    assert v("clgate_model_mica_ratio", {"project": "default", "model": "beta"}) == 0.6
    # the regression carries the class the alert names
    assert (
        v(
            "clgate_model_class_regression_ratio",
            {"project": "default", "model": "alpha", "class_name": "dog"},
        )
        == 0.25
    )
    assert (
        v("clgate_model_class_regression_ratio", {"project": "default", "model": "beta", "class_name": ""})
        is None
    )  # no baseline
    assert v("clgate_model_verdict", {"project": "default", "model": "alpha", "verdict": "FAIL"}) == 1.0
    assert v("clgate_model_verdict", {"project": "default", "model": "alpha", "verdict": "PASS"}) == 0.0
    # only the worst three classes, worst first
    assert (
        v(
            "clgate_model_worst_class_accuracy_ratio",
            {"project": "default", "model": "alpha", "rank": "1", "class_name": "dog"},
        )
        == 0.1
    )
    assert (
        v(
            "clgate_model_worst_class_accuracy_ratio",
            {"project": "default", "model": "alpha", "rank": "3", "class_name": "fox"},
        )
        == 0.5
    )
    text = generate_latest(registry).decode()
    assert 'class_name="owl"' not in text
    # counters, jobs, histogram, queues, workers
    assert v("clgate_decisions_total", {"project": "default", "verdict": "FAIL"}) == 1.0
    assert v("clgate_decisions_total", {"project": "default", "verdict": "ERROR"}) == 0.0
    assert v("clgate_jobs", {"state": "succeeded", "queue": "gpu"}) == 2.0
    assert v("clgate_jobs", {"state": "queued", "queue": "gpu"}) == 1.0
    assert v("clgate_job_duration_seconds_bucket", {"mode": "retrain", "le": "30.0"}) == 1.0  # 3 s
    assert v("clgate_job_duration_seconds_bucket", {"mode": "retrain", "le": "60.0"}) == 2.0  # 3 s, 42 s
    assert v("clgate_job_duration_seconds_bucket", {"mode": "retrain", "le": "+Inf"}) == 3.0
    assert v("clgate_job_duration_seconds_sum", {"mode": "retrain"}) == 745.0
    assert v("clgate_queue_length", {"queue": "gpu"}) == 4.0
    assert v("clgate_workers", {"queue": "gpu"}) == 1.0  # w2 is stale
    assert v("clgate_workers", {"queue": "cpu"}) == 0.0
    assert v("clgate_oldest_job_age_seconds", {"state": "queued"}) > 3000
    assert v("clgate_oldest_job_age_seconds", {"state": "running"}) > 3000
    for line in text.splitlines():
        if line.startswith("# TYPE"):
            _, _, name, kind = line.split()
            assert name.startswith("clgate_")
            if kind == "counter":
                assert name.endswith("_total"), name
            if "accuracy" in name or "mica" in name or "regression" in name:
                assert name.endswith("_ratio"), name


def test_collector_survives_a_broker_outage(sessions):
    def down():
        raise ConnectionError("redis away")

    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(sessions, queue_lengths=down))
    assert registry.get_sample_value("clgate_queue_length", {"queue": "gpu"}) is None
    assert (
        registry.get_sample_value("clgate_decisions_total", {"project": "default", "verdict": "PASS"}) == 0.0
    )


# ---------------------------------------------------------------------- alert rules
REQUIRED_ALERTS = {
    "ClgateWorstClassRegression",
    "ClgateMicaBelowFloor",
    "ClgatePooledClassBelowFloor",
    "ClgateGateFailures",
    "ClgateJobsStuck",
    "ClgateNoWorkerConsuming",
    "ClgateApiDown",
    "ClgateApiAbsent",
    "ClgateDeploymentSeriesAbsent",
}


def _alerts() -> dict[str, dict]:
    doc = yaml.safe_load(RULES.read_text())
    return {r["alert"]: r for g in doc["groups"] for r in g["rules"] if "alert" in r}


def test_rules_have_severity_summary_description_runbook():
    alerts = _alerts()
    assert set(alerts) >= REQUIRED_ALERTS
    for name, rule in alerts.items():
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, name
        for key in ("summary", "description", "runbook_url"):
            assert rule["annotations"].get(key), (name, key)
        assert rule.get("for"), name  # nothing pages on a single evaluation


def test_quality_alerts_survive_gaps_and_name_what_they_are_about():
    alerts = _alerts()
    for name in (
        "ClgateWorstClassRegression",
        "ClgateMicaBelowFloor",
        "ClgatePooledClassBelowFloor",
        "ClgateGateFailures",
    ):
        assert alerts[name].get("keep_firing_for"), name
    regression = alerts["ClgateWorstClassRegression"]
    assert "class_name" in regression["expr"] and "$labels.class_name" in regression["annotations"]["summary"]
    assert "cell" in regression["expr"] and "$labels.cell" in regression["annotations"]["summary"]  # NI/NIC
    assert "on (instance, queue)" in alerts["ClgateNoWorkerConsuming"]["expr"]
    assert 'absent(up{job="clgate-api"} == 1)' in alerts["ClgateApiAbsent"]["expr"]


def test_every_alert_has_a_promtool_unit_test():
    tested = {
        t["alertname"]
        for group in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for t in group.get("alert_rule_test", [])
    }
    assert set(_alerts()) <= tested, set(_alerts()) - tested


def test_rules_use_only_exported_metrics():
    import re

    from clgate.service.metrics import HEADLINE

    exported = {name for _, name, _ in HEADLINE} | {
        "clgate_model_worst_class_accuracy_ratio",
        "clgate_model_worst_cell_accuracy_ratio",
        "clgate_model_verdict",
        "clgate_model_last_decision_timestamp_seconds",
        "clgate_decisions_total",
        "clgate_jobs",
        "clgate_job_duration_seconds_bucket",
        "clgate_job_duration_seconds_sum",
        "clgate_job_duration_seconds_count",
        "clgate_queue_length",
        "clgate_workers",
        "clgate_oldest_job_age_seconds",
    }
    text = "\n".join(r["expr"] for r in _alerts().values())
    used = set(re.findall(r"\bclgate_[a-z_]+", text))
    assert used and used <= exported, used - exported
    # the collector names its series; the quality gauges are named in the metric registry
    source = "".join(
        (REPO / path).read_text() for path in ("service/metrics.py", "clgate/metrics/registry.py")
    )
    for name in exported:
        base = name.removesuffix("_total").removesuffix("_bucket").removesuffix("_sum").removesuffix("_count")
        assert f'"{base}' in source, name


@pytest.mark.integration
def test_promtool_checks_and_unit_tests_the_rules(require_binary):
    promtool = require_binary("promtool", "prometheus")
    check = subprocess.run(
        [promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr
    tests = subprocess.run(
        [promtool, "test", "rules", str(RULE_TESTS)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=RULE_TESTS.parent,
        check=False,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "SUCCESS" in tests.stdout + tests.stderr


def test_runbook_urls_point_at_headings_of_the_service_docs():
    import re

    doc = (REPO / "docs" / "service.md").read_text()
    anchors = {
        re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-")
        for h in re.findall(r"^#+ (.+)$", doc, re.MULTILINE)
    }
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            url = rule["annotations"]["runbook_url"]
            assert url.split("#", 1)[0] == "docs/service.md", url  # in this repository, no placeholder site
            assert url.split("#", 1)[1].startswith("runbook-") and url.split("#", 1)[1] in anchors, url


# ---------------------------------------------------------------------- a real Prometheus, two API replicas
def _query(prom_url: str, expr: str) -> list[dict]:
    import httpx

    r = httpx.get(f"{prom_url}/api/v1/query", params={"query": expr}, timeout=5)
    r.raise_for_status()
    return r.json()["data"]["result"]


@pytest.mark.integration
def test_prometheus_scraping_two_api_replicas_sees_each_quality_series_once(
    tmp_path, redis_url, require_binary
):
    """Celery mode, one deployment: two `clgate serve` replicas and one `clgate exporter` on one store,
    scraped by a real Prometheus (the API with a viewer key as bearer token). Each deployment series
    exists once; each replica is a target of its own."""
    import sys

    import httpx

    from clgate.store.settings import Settings
    from tests.fixtures.service import ADMIN_KEY, Proc, _wait, base_env, free_port

    prometheus = require_binary("prometheus")
    data_dir = tmp_path / "data"
    env = base_env(data_dir, CLGATE_BROKER_URL=redis_url)
    procs: list[Proc] = []
    try:
        apis = []
        for i in range(2):  # one after the other: the first one migrates the store
            port = free_port()
            procs.append(
                Proc(
                    [
                        sys.executable,
                        "-m",
                        "clgate",
                        "serve",
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(port),
                        "--log-level",
                        "warning",
                    ],
                    env,
                    tmp_path / f"api{i}.log",
                )
            )
            url = f"http://127.0.0.1:{port}"
            _wait(
                lambda url=url: httpx.get(url + "/readyz", timeout=2).status_code == 200,
                90,
                f"API {i}",
                procs[-1].popen,
                procs[-1].log,
            )
            apis.append(f"127.0.0.1:{port}")
        admin = httpx.Client(base_url=f"http://{apis[0]}", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
        viewer = admin.post("/v1/keys", json={"name": "prometheus", "role": "viewer"}).json()["key"]
        admin.close()
        sessions = make_sessionmaker(make_engine(Settings(data_dir=data_dir).resolved_database_url()))
        _seed(sessions)  # decisions for models alpha and beta, jobs, heartbeats
        _seed_ni(sessions, _ni_decision_headline(cat_by_day=0))  # an NI model: cat pooled 9/20, cell 0/10

        # the replicas: per-process series only, never the deployment's
        text = httpx.get(f"http://{apis[1]}/metrics", headers={"Authorization": f"Bearer {viewer}"}).text
        assert 'clgate_api_info{store_metrics="false"' in text and "clgate_model_mica_ratio" not in text

        exporter_port = free_port()
        procs.append(
            Proc(
                [sys.executable, "-m", "clgate", "exporter", "--port", str(exporter_port)],
                env,
                tmp_path / "exporter.log",
            )
        )
        _wait(
            lambda: (
                "clgate_model_mica_ratio"
                in httpx.get(f"http://127.0.0.1:{exporter_port}/metrics", timeout=5).text
            ),
            60,
            "exporter",
            procs[-1].popen,
            procs[-1].log,
        )

        key_file = tmp_path / "viewer.key"
        key_file.write_text(viewer)
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(RULES)],
            "scrape_configs": [
                {
                    "job_name": "clgate-api",
                    "metrics_path": "/metrics",
                    "authorization": {"type": "Bearer", "credentials_file": str(key_file)},
                    "static_configs": [{"targets": apis}],
                },
                {
                    "job_name": "clgate-exporter",
                    "static_configs": [{"targets": [f"127.0.0.1:{exporter_port}"]}],
                },
            ],
        }
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        prom_port = free_port()
        procs.append(
            Proc(
                [
                    prometheus,
                    f"--config.file={tmp_path / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{prom_port}",
                ],
                dict(env),
                tmp_path / "prometheus.log",
            )
        )
        prom = f"http://127.0.0.1:{prom_port}"

        def scraped() -> bool:
            up = _query(prom, "up")
            return len(up) == 3 and all(s["value"][1] == "1" for s in up) and _query(prom, "clgate_jobs")

        _wait(scraped, 60, "prometheus scrapes", procs[-1].popen, procs[-1].log)
        assert {s["metric"]["instance"] for s in _query(prom, 'up{job="clgate-api"}')} == set(apis)
        assert len(_query(prom, "clgate_api_info")) == 2  # one per replica
        for expr, n in (
            ("clgate_model_mica_ratio", 3),  # alpha, beta and ni, once each
            ('clgate_model_class_regression_ratio{class_name="dog"}', 1),
            ("clgate_decisions_total", 4),  # one per verdict
            ("clgate_queue_length", 2),  # gpu and cpu
            ('clgate_jobs{queue="gpu", state="queued"}', 1),
        ):
            series = _query(prom, expr)
            assert len(series) == n, (expr, series)
            assert {s["metric"]["job"] for s in series} == {"clgate-exporter"}, expr
        # sums are right: not doubled by the replicas
        assert _query(prom, 'sum(clgate_jobs{queue="gpu"})')[0]["value"][1] == "4"
        assert _query(prom, 'sum(clgate_model_mica_ratio{model="alpha"})')[0]["value"][1] == "0.1"
        # the NI model: its cells are their own series, its regression names the cell, and the pooled
        # class below the floor makes the NI alert pending (its `for` is longer than this test)
        cells = _query(prom, 'clgate_model_worst_cell_accuracy_ratio{model="ni", rank="1"}')
        assert [(c["metric"]["cell"], c["metric"]["class_name"], c["metric"]["group"]) for c in cells] == [
            ("cat @ day", "cat", "day")
        ]
        regression = _query(prom, 'clgate_model_class_regression_ratio{model="ni"}')
        assert [(r["metric"]["class_name"], r["metric"]["cell"]) for r in regression] == [
            ("cat", "cat @ day")
        ]

        def pending() -> list[dict]:
            alerts = httpx.get(f"{prom}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
            return [a["labels"] for a in alerts if a["labels"]["alertname"] == "ClgatePooledClassBelowFloor"]

        _wait(lambda: bool(pending()), 30, "the pooled-class alert", procs[-1].popen, procs[-1].log)
        assert [(a["model"], a["class_name"]) for a in pending()] == [("ni", "cat")]  # alpha, beta are NC
    finally:
        for p in reversed(procs):
            p.stop()


def test_exporter_needs_celery_mode_and_a_valid_port(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from clgate.cli import app

    for name in [k for k in __import__("os").environ if k.startswith("CLGATE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("CLGATE_DATA_DIR", str(tmp_path))
    res = CliRunner().invoke(app, ["exporter", "--port", "9108"])
    assert (
        res.exit_code == 2
        and "CLGATE_BROKER_URL" in res.output
        and "exports these series itself" in res.output
    )
    monkeypatch.setenv("CLGATE_BROKER_URL", "redis://127.0.0.1:1/0")
    res = CliRunner().invoke(app, ["exporter", "--port", "70000"])
    assert res.exit_code == 2 and "--port" in res.output


# ---------------------------------------------------------------------- NI/NIC decisions
def _ni_decision_headline(cat_by_day: int = 3) -> dict:
    """The headline of a real NI decision (docs/metrics.md's cats and dogs by day, then by night), the
    candidate's cat-by-day cell fallen from 9/10 to ``cat_by_day``/10 against a baseline that kept it."""
    from clgate.gate import gate_logs
    from clgate.policy import parse_policy
    from clgate.schemas import EvaluationLog

    def log(cat_by_day: int) -> EvaluationLog:
        def end(task: int, correct: list[int], total: list[int]) -> dict:
            return {
                "iteration": 100 * task,
                "task": task,
                "task_end": True,
                "correct": correct,
                "total": total,
            }

        return EvaluationLog.parse(
            {
                "scenario": "ni",
                "class_of": [0, 1, 0, 1],
                "class_names": ["cat", "dog"],
                "groups": ["day", "night"],
                "tasks": [[0, 1], [2, 3]],
                "points": [end(1, [9, 8, 0, 0], [10, 10, 0, 0]), end(2, [cat_by_day, 8, 9, 7], [10] * 4)],
            }
        )

    policy = parse_policy({"name": "ni", "version": "1", "rules": [{"metric": "mica", "floor": 0.5}]})
    decision = gate_logs([log(cat_by_day)], policy, baseline=log(9)).decision
    return decision.headline.model_dump(mode="json")


def _seed_ni(sessions, headline: dict) -> None:
    """A finished metrics job of model ``ni`` and its FAIL decision with ``headline``."""
    with session_scope(sessions) as s:
        p = Policy(name="ni", version="1", document={}, sha256="0" * 64)
        s.add(p)
        s.flush()
        job = Job(
            mode="metrics", queue="cpu", model_name="ni", policy_id=p.id, state="succeeded", progress={}
        )
        s.add(job)
        s.flush()
        s.add(
            Decision(
                job_id=job.id, policy_id=p.id, model_name="ni", verdict="FAIL", headline=headline, document={}
            )
        )


def test_ni_decision_names_cells_and_exports_the_pooled_worst_class(sessions):
    headline = _ni_decision_headline()
    assert (
        headline["class_regression_class"] == "cat @ day" and headline["pooled_classes"][0]["name"] == "cat"
    )
    _seed_ni(sessions, headline)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(sessions, queue_lengths=lambda: {}, worst_classes=3))
    v = registry.get_sample_value
    model = {"project": "default", "model": "ni"}
    # the worst-class gauge ranks real classes, pooled over their cells: cat 12/20, dog 15/20
    assert v("clgate_model_worst_class_accuracy_ratio", model | {"rank": "1", "class_name": "cat"}) == 0.6
    assert v("clgate_model_worst_class_accuracy_ratio", model | {"rank": "2", "class_name": "dog"}) == 0.75
    # the cells are their own series, each named with its class and its group
    cell = model | {"rank": "1", "cell": "cat @ day", "class_name": "cat", "group": "day"}
    assert v("clgate_model_worst_cell_accuracy_ratio", cell) == pytest.approx(0.3)
    night = model | {"rank": "2", "cell": "dog @ night", "class_name": "dog", "group": "night"}
    assert v("clgate_model_worst_cell_accuracy_ratio", night) == pytest.approx(0.7)
    # the regression names the class whose cell dropped, and the cell
    regression = model | {"class_name": "cat", "cell": "cat @ day"}
    assert v("clgate_model_class_regression_ratio", regression) == pytest.approx(0.6)
    text = generate_latest(registry).decode()
    assert 'class_name="cat @ day"' not in text  # no label says class where it holds a cell


def test_nc_exposition_has_no_cell_series(sessions):
    _seed(sessions)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(sessions, queue_lengths=lambda: {}, worst_classes=3))
    text = generate_latest(registry).decode()
    assert "clgate_model_worst_cell_accuracy_ratio" not in text and "cell=" not in text
