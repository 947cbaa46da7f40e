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
    return {"acc": 0.9, "mica": mica, "wamica": mica + 0.05, "min_acc": 0.4, "min_class_acc": mica, "wc_acc": 0.5,
            "class_regression": regression,
            "worst_classes": [{"id": i, "name": n, "accuracy": a} for i, (n, a) in enumerate(worst)]}


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
        for i, (mode, state, duration) in enumerate([
            ("retrain", "succeeded", 42.0), ("retrain", "succeeded", 700.0), ("metrics", "succeeded", 0.5),
            ("retrain", "queued", None), ("metrics", "running", None), ("retrain", "failed", 3.0),
        ]):
            queue = "gpu" if mode == "retrain" else "cpu"
            job = Job(mode=mode, queue=queue, model_name="alpha" if i != 2 else "beta", policy_id=p.id, state=state,
                      progress={}, duration_s=duration, created_at=t0 + dt.timedelta(minutes=i),
                      started_at=t0 + dt.timedelta(minutes=i) if state == "running" else None)
            s.add(job)
            jobs.append(job)
        s.flush()
        worst = [("cat", 0.2), ("dog", 0.1), ("fox", 0.5), ("owl", 0.7)]
        s.add(Decision(job_id=jobs[0].id, policy_id=p.id, model_name="alpha", verdict="PASS", created_at=t0,
                       headline=_headline(0.8, worst), document={}))
        s.add(Decision(job_id=jobs[2].id, policy_id=p.id, model_name="beta", verdict="WARN", created_at=t0,
                       headline=_headline(0.6, [("x", 0.6)]), document={}))
        s.add(Decision(job_id=jobs[1].id, policy_id=p.id, model_name="alpha", verdict="FAIL",
                       created_at=t0 + dt.timedelta(minutes=5), headline=_headline(0.1, worst, 0.25), document={}))
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
    assert v("clgate_model_class_regression_ratio", {"project": "default", "model": "alpha"}) == 0.25
    assert v("clgate_model_class_regression_ratio", {"project": "default", "model": "beta"}) is None  # no baseline: no sample
    assert v("clgate_model_verdict", {"project": "default", "model": "alpha", "verdict": "FAIL"}) == 1.0
    assert v("clgate_model_verdict", {"project": "default", "model": "alpha", "verdict": "PASS"}) == 0.0
    # only the worst three classes, worst first
    assert v("clgate_model_worst_class_accuracy_ratio", {"project": "default", "model": "alpha", "rank": "1", "class_name": "dog"}) == 0.1
    assert v("clgate_model_worst_class_accuracy_ratio", {"project": "default", "model": "alpha", "rank": "3", "class_name": "fox"}) == 0.5
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
    assert registry.get_sample_value("clgate_decisions_total", {"project": "default", "verdict": "PASS"}) == 0.0


# ---------------------------------------------------------------------- alert rules
REQUIRED_ALERTS = {"ClgateWorstClassRegression", "ClgateMicaBelowFloor", "ClgateGateFailures", "ClgateJobsStuck",
                   "ClgateNoWorkerConsuming"}


def test_rules_have_severity_summary_description_runbook():
    doc = yaml.safe_load(RULES.read_text())
    alerts = {r["alert"]: r for g in doc["groups"] for r in g["rules"] if "alert" in r}
    assert REQUIRED_ALERTS <= set(alerts)
    for name, rule in alerts.items():
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, name
        for key in ("summary", "description", "runbook_url"):
            assert rule["annotations"].get(key), (name, key)
        assert rule["annotations"]["runbook_url"].startswith("https://"), name


def test_rules_use_only_exported_metrics():
    import re

    from clgate.service.metrics import HEADLINE

    exported = {name for _, name, _ in HEADLINE} | {
        "clgate_model_worst_class_accuracy_ratio", "clgate_model_verdict", "clgate_model_last_decision_timestamp_seconds",
        "clgate_decisions_total", "clgate_jobs", "clgate_job_duration_seconds_bucket", "clgate_job_duration_seconds_sum",
        "clgate_job_duration_seconds_count", "clgate_queue_length", "clgate_workers", "clgate_oldest_job_age_seconds",
    }
    text = RULES.read_text()
    used = set(re.findall(r"\bclgate_[a-z_]+", text))
    assert used and used <= exported, used - exported
    source = (REPO / "service" / "metrics.py").read_text()
    for name in exported:
        base = name.removesuffix("_total").removesuffix("_bucket").removesuffix("_sum").removesuffix("_count")
        assert f'"{base}' in source, name


@pytest.mark.integration
def test_promtool_checks_and_unit_tests_the_rules(require_binary):
    promtool = require_binary("promtool", "prometheus")
    check = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    tests = subprocess.run([promtool, "test", "rules", str(RULE_TESTS)], capture_output=True, text=True, timeout=120,
                           cwd=RULE_TESTS.parent, check=False)
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "SUCCESS" in tests.stdout + tests.stderr


def test_runbook_urls_point_at_headings_of_the_service_docs():
    import re

    doc = (REPO / "docs" / "service.md").read_text()
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-")
               for h in re.findall(r"^#+ (.+)$", doc, re.MULTILINE)}
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            url = rule["annotations"]["runbook_url"]
            assert url.split("#", 1)[0].endswith("docs/service.md"), url
            assert url.split("#", 1)[1] in anchors, url
