"""deploy/: the compose file, the Kubernetes manifests, Prometheus, Alertmanager and Grafana configs
parse and refer to things that exist: files, images with pinned tags, clgate commands and options,
settings, metric names, health routes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import typer.main
import yaml

from clgate.service.metrics import HEADLINE
from clgate.store.settings import Settings

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
THIRD_PARTY = {"redis", "postgres", "prom/prometheus", "prom/alertmanager", "grafana/grafana"}
OWN_IMAGES = {"clgate", "clgate-gpu", "clgate:latest", "clgate:gpu"}
SETTINGS = {f"CLGATE_{name.upper()}" for name in Settings.model_fields}


def compose() -> dict:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def manifests() -> list[dict]:
    docs = []
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        if path.name != "kustomization.yaml":
            docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def check_clgate_command(argv: list[str]) -> None:
    """``clgate ...`` parses with the real CLI (commands and options exist, values valid); raises
    otherwise."""
    from clgate.cli import app

    assert argv[0] == "clgate", argv
    cmd = typer.main.get_command(app)
    ctx = cmd.make_context("clgate", list(argv[1:]))
    while hasattr(cmd, "resolve_command"):  # a group: descend into the named subcommand
        args = [*ctx._protected_args, *ctx.args]
        assert args, f"{argv}: no subcommand"
        name, cmd, rest = cmd.resolve_command(ctx, args)
        assert cmd is not None, f"{argv}: no command {name}"
        ctx = cmd.make_context(name, list(rest), parent=ctx)


def test_command_check_rejects_what_the_cli_rejects():
    check_clgate_command(["clgate", "worker", "--queues", "gpu", "--concurrency", "1"])
    for bad in (
        ["clgate", "worker", "--queue", "gpu"],
        ["clgate", "serv"],
        ["clgate", "db", "downgrade"],
        ["clgate", "serve", "--port", "x"],
    ):
        with pytest.raises(Exception):  # noqa: B017 - click's usage errors
            check_clgate_command(bad)


def _image_ok(image: str) -> None:
    if image in OWN_IMAGES:
        return
    name, _, tag = image.partition(":")
    assert name in THIRD_PARTY, image
    assert tag and tag != "latest", f"{image}: pin a tag"


def test_compose_services_and_references():
    doc = compose()
    services = doc["services"]
    assert {
        "api",
        "worker-gpu",
        "worker-cpu",
        "redis",
        "postgres",
        "prometheus",
        "alertmanager",
        "grafana",
    } <= set(services)
    for name, svc in services.items():
        _image_ok(svc["image"])
        if "build" in svc:
            assert (DEPLOY / svc["build"]["context"] / svc["build"]["dockerfile"]).is_file(), name
        command = svc.get("command")
        if command and command[0] == "clgate":
            check_clgate_command(command)
        for volume in svc.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), (name, source)
            else:
                assert source in doc["volumes"], (name, source)
        for key in svc.get("environment") or {}:
            if key.startswith("CLGATE_"):
                assert key in SETTINGS, (name, key)
    # every service that runs clgate builds on one image that is built somewhere in the file
    built = {svc["image"] for svc in services.values() if "build" in svc}
    assert {svc["image"] for svc in services.values() if svc["image"].startswith("clgate")} <= built


def test_compose_gpu_worker_redis_persistence_and_queues():
    services = compose()["services"]
    devices = services["worker-gpu"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    assert services["worker-gpu"]["command"][services["worker-gpu"]["command"].index("--queues") + 1] == "gpu"
    assert services["worker-cpu"]["command"][services["worker-cpu"]["command"].index("--queues") + 1] == "cpu"
    assert "--appendonly" in services["redis"]["command"] and services["redis"]["volumes"]
    env = services["api"]["environment"]
    assert env["CLGATE_BROKER_URL"].startswith("redis://redis:")
    assert (
        env["CLGATE_DATABASE_URL"].startswith("postgresql+psycopg://")
        and "@postgres:" in env["CLGATE_DATABASE_URL"]
    )
    for secret in compose()["secrets"].values():
        assert secret["file"].startswith("./secrets/")  # operator-provided, git-ignored
    assert (DEPLOY / "secrets" / ".gitignore").read_text().strip().splitlines()[-2:] == ["*", "!.gitignore"]


def test_dockerfile_copies_existing_paths_and_runs_clgate():
    text = (DEPLOY / "Dockerfile").read_text()
    for line in text.splitlines():
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                assert (REPO / source).exists(), source
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", text, re.MULTILINE)[1])
    check_clgate_command(cmd)
    assert "python:3.11" in text


def test_prometheus_alertmanager_grafana_configs():
    prom = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    mounts = {v.split(":")[1] for v in compose()["services"]["prometheus"]["volumes"] if v.startswith(".")}
    assert set(prom["rule_files"]) <= mounts
    scrape = prom["scrape_configs"][0]
    assert scrape["metrics_path"] == "/metrics" and scrape["static_configs"][0]["targets"] == ["api:8000"]
    exporter = prom["scrape_configs"][1]
    assert exporter["job_name"] == "clgate-exporter" and exporter["static_configs"][0]["targets"] == [
        "exporter:9108"
    ]
    assert compose()["services"]["exporter"]["command"][:2] == ["clgate", "exporter"]
    assert scrape["authorization"]["credentials_file"] in {
        s["target"] for s in compose()["services"]["prometheus"]["secrets"]
    }
    am = yaml.safe_load((DEPLOY / "alertmanager" / "alertmanager.yml").read_text())
    names = {r["name"] for r in am["receivers"]}
    assert am["route"]["receiver"] in names and all(r["receiver"] in names for r in am["route"]["routes"])
    dash = json.loads((DEPLOY / "grafana" / "dashboards" / "clgate.json").read_text())
    exported = set(re.findall(r'"(clgate_[a-z_]+)"', (REPO / "service" / "metrics.py").read_text()))
    exported |= {"clgate_job_duration_seconds_bucket", "clgate_decisions_total"}
    exported |= {name for _, name, _ in HEADLINE}  # the quality gauges, named in the metric registry
    for panel in dash["panels"]:
        for target in panel["targets"]:
            used = set(re.findall(r"\bclgate_[a-z_]+", target["expr"]))
            assert used and used <= exported, (panel["title"], used - exported)
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert {"model", "project"} <= set(variables)
    for panel in dash["panels"]:
        for target in panel["targets"]:
            if "clgate_model_" in target["expr"]:
                assert 'model=~"$model"' in target["expr"] and 'project=~"$project"' in target["expr"], panel[
                    "title"
                ]
    provider = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "dashboards" / "clgate.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"


def _containers(doc: dict) -> list[dict]:
    spec = doc.get("spec", {})
    template = spec.get("template") or spec.get("jobTemplate", {}).get("spec", {}).get("template") or {}
    return [
        *template.get("spec", {}).get("initContainers", []),
        *template.get("spec", {}).get("containers", []),
    ]


def test_k8s_manifests_reference_existing_things():
    docs = manifests()
    by_kind: dict[str, dict[str, dict]] = {}
    for d in docs:
        by_kind.setdefault(d["kind"], {})[d["metadata"]["name"]] = d
    kustom = yaml.safe_load((DEPLOY / "k8s" / "kustomization.yaml").read_text())
    for resource in kustom["resources"]:
        assert (DEPLOY / "k8s" / resource).is_file(), resource
    config = by_kind["ConfigMap"]["clgate-config"]["data"]
    assert set(config) <= SETTINGS, set(config) - SETTINGS
    Settings(**{k.removeprefix("CLGATE_").lower(): v for k, v in config.items()})  # the values validate
    for kind in ("Deployment", "StatefulSet", "Job"):
        for d in by_kind.get(kind, {}).values():
            for c in _containers(d):
                _image_ok(c["image"])
                if c.get("command", [""])[0] == "clgate":
                    check_clgate_command(c["command"])
                for ref in c.get("envFrom", []):
                    if "configMapRef" in ref:
                        assert ref["configMapRef"]["name"] in by_kind["ConfigMap"]
                    if "secretRef" in ref:  # created from the environment, documented in config.yaml
                        assert ref["secretRef"]["name"] in (DEPLOY / "k8s" / "config.yaml").read_text()
            for volume in d["spec"]["template"]["spec"].get("volumes", []):
                claim = volume.get("persistentVolumeClaim", {}).get("claimName")
                if claim:
                    assert claim in by_kind["PersistentVolumeClaim"]
    assert "Secret" not in by_kind, "secrets come from the environment, not from the repository"


def test_k8s_gpu_pool_probes_and_queue_scaling():
    docs = {(d["kind"], d["metadata"]["name"]): d for d in manifests()}
    gpu = _containers(docs[("Deployment", "clgate-worker-gpu")])[0]
    assert gpu["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert gpu["command"][gpu["command"].index("--queues") + 1] == "gpu"
    api = _containers(docs[("Deployment", "clgate-api")])[0]
    from clgate.service.app import create_app

    paths = set(create_app(Settings(data_dir="/nonexistent")).openapi()["paths"])
    assert api["livenessProbe"]["httpGet"]["path"] == "/healthz" and "/healthz" in paths
    assert api["readinessProbe"]["httpGet"]["path"] == "/readyz" and "/readyz" in paths
    for name, queue in (("clgate-worker-gpu", "gpu"), ("clgate-worker-cpu", "cpu")):
        scaled = docs[("ScaledObject", name)]
        assert scaled["spec"]["scaleTargetRef"]["name"] == name and ("Deployment", name) in docs
        redis_trigger = next(t for t in scaled["spec"]["triggers"] if t["type"] == "redis")
        assert redis_trigger["metadata"]["listName"] == queue
        assert redis_trigger["metadata"]["address"].startswith("redis.")
        assert ("Service", "redis") in docs
        probe = _containers(docs[("Deployment", name)])[0]["livenessProbe"]["exec"]["command"][-1]
        assert f"clgate-{queue}@" in probe  # the node name `clgate worker --queues {queue}` gives itself
    prom_trigger = next(
        t
        for t in docs[("ScaledObject", "clgate-worker-gpu")]["spec"]["triggers"]
        if t["type"] == "prometheus"
    )
    # running jobs only (queued ones are the redis trigger's), from the exporter: counted once per deployment
    query = prom_trigger["metadata"]["query"]
    assert "clgate_jobs" in query and 'job="clgate-exporter"' in query and 'state="running"' in query


def test_k8s_deployment_series_exported_once_and_scrapeable_with_a_key():
    docs = {(d["kind"], d["metadata"]["name"]): d for d in manifests()}
    api = docs[("Deployment", "clgate-api")]
    assert api["spec"]["replicas"] >= 2
    assert not any(
        k.startswith("prometheus.io/") for k in api["spec"]["template"]["metadata"].get("annotations", {})
    )
    exporter = docs[("Deployment", "clgate-exporter")]
    assert exporter["spec"]["replicas"] == 1 and exporter["spec"]["strategy"]["type"] == "Recreate"
    assert _containers(exporter)[0]["command"][:2] == ["clgate", "exporter"]
    port = _containers(exporter)[0]["ports"][0]["containerPort"]
    assert docs[("Service", "clgate-exporter")]["spec"]["ports"][0]["port"] == port
    assert docs[("NetworkPolicy", "clgate-exporter")]["spec"]["ingress"][0]["ports"][0]["port"] == port
    monitor = docs[("ServiceMonitor", "clgate-api")]
    endpoint = monitor["spec"]["endpoints"][0]
    assert endpoint["authorization"]["credentials"] == {"name": "clgate-metrics", "key": "viewer-key"}
    assert monitor["spec"]["selector"]["matchLabels"] == docs[("Service", "clgate-api")]["metadata"]["labels"]
    assert docs[("ServiceMonitor", "clgate-exporter")]["spec"]["endpoints"][0]["port"] == "metrics"
    plain = yaml.safe_load((DEPLOY / "prometheus" / "prometheus-k8s.yml").read_text())
    jobs = {c["job_name"]: c for c in plain["scrape_configs"]}
    assert (
        set(jobs) == {"clgate-api", "clgate-exporter"}
        and "credentials_file" in jobs["clgate-api"]["authorization"]
    )


# ---------------------------------------------------------------------- database roles
def _env_of(container: dict) -> dict[str, str]:
    return {
        e["name"]: e["valueFrom"]["secretKeyRef"]["key"] for e in container.get("env", []) if "valueFrom" in e
    }


def test_migrations_run_as_the_owner_role_and_the_service_as_the_app_role():
    services = compose()["services"]
    for name in ("migrate", "grant"):
        assert "//clgate_owner:" in services[name]["environment"]["CLGATE_DATABASE_URL"], name
    assert services["grant"]["command"] == ["clgate", "db", "grant", "clgate_app"]
    for name in ("api", "worker-gpu", "worker-cpu"):
        assert "//clgate_app:" in services[name]["environment"]["CLGATE_DATABASE_URL"], name
        assert services[name]["depends_on"]["grant"]["condition"] == "service_completed_successfully"
    assert (
        "./postgres/init-roles.sh:/docker-entrypoint-initdb.d/10-clgate-roles.sh:ro"
        in services["postgres"]["volumes"]
    )
    job = next(d for d in manifests() if d["kind"] == "Job" and d["metadata"]["name"] == "clgate-migrate")
    steps = _containers(job)
    assert [c["command"][1:3] for c in steps] == [["db", "upgrade"], ["db", "grant"]]
    for c in steps:
        assert _env_of(c) == {"CLGATE_DATABASE_URL": "CLGATE_OWNER_DATABASE_URL"}
    for d in manifests():
        if d["kind"] in ("Deployment", "StatefulSet") and d["metadata"]["name"].startswith("clgate"):
            for c in _containers(d):
                assert "CLGATE_OWNER_DATABASE_URL" not in json.dumps(c), d["metadata"]["name"]


@pytest.mark.integration
def test_init_roles_script_on_a_real_postgresql(postgres_url, tmp_path):
    """deploy/postgres/init-roles.sh, then migrate and grant as the owner: the app role runs but cannot
    rewrite history."""
    import os
    import shutil
    import subprocess
    import sys
    from urllib.parse import urlsplit

    from sqlalchemy import create_engine, text

    psql = shutil.which("psql") or next(iter(sorted(Path("/").glob("usr/lib/postgresql/*/bin/psql"))), None)
    assert psql is not None, "psql not found next to the PostgreSQL server"
    url = urlsplit(postgres_url.replace("postgresql+psycopg", "postgresql"))
    env = {
        **os.environ,
        "PATH": f"{Path(psql).parent}:{os.environ['PATH']}",
        "PGHOST": url.hostname,
        "PGPORT": str(url.port),
        "POSTGRES_USER": url.username,
        "POSTGRES_DB": url.path.lstrip("/"),
        "PG_OWNER_PASSWORD": "owner-pw",
        "PG_APP_PASSWORD": "app-pw",
    }
    r = subprocess.run(
        ["sh", str(DEPLOY / "postgres" / "init-roles.sh")],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    owner_url = postgres_url.replace("//clgate@", "//clgate_owner:owner-pw@")
    app_url = postgres_url.replace("//clgate@", "//clgate_app:app-pw@")
    cli_env = {k: v for k, v in os.environ.items() if not k.startswith("CLGATE_")}
    cli_env.update(CLGATE_DATA_DIR=str(tmp_path), CLGATE_DATABASE_URL=owner_url)
    for argv in (["db", "upgrade"], ["db", "grant", "clgate_app"]):
        r = subprocess.run(
            [sys.executable, "-m", "clgate", *argv],
            check=False,
            env=cli_env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stdout + r.stderr
    engine = create_engine(app_url)
    with engine.begin() as conn:
        assert conn.execute(text("SELECT count(*) FROM chain_heads")).scalar() == 3
    for statement in (
        "TRUNCATE audit_events",
        "DELETE FROM decisions",
        "UPDATE waivers SET approver = 'x'",
        "ALTER TABLE audit_events DISABLE TRIGGER ALL",
        "CREATE TABLE sneaky (x int)",
    ):
        with engine.connect() as conn, pytest.raises(Exception, match=r"permission denied|must be owner"):
            conn.execute(text(statement))
    engine.dispose()
