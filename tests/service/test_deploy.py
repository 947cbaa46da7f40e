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


def config_text() -> str:
    return (DEPLOY / "k8s" / "config.yaml").read_text()


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
                for name, (kind, ref, key) in _env_refs(c).items():
                    assert name in SETTINGS, (d["metadata"]["name"], name)
                    if kind == "configMapKeyRef":
                        assert key in by_kind["ConfigMap"][ref]["data"], (ref, key)
                    else:  # created from the environment: the command that makes it is in config.yaml
                        assert f"create secret generic {ref} --from-literal={key}=" in config_text(), ref
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
def _env_refs(container: dict) -> dict[str, tuple[str, str, str]]:
    """``{variable: (configMapKeyRef | secretKeyRef, object name, key)}`` of a container's ``env``."""
    refs = {}
    for e in container.get("env", []):
        for kind, ref in e.get("valueFrom", {}).items():
            refs[e["name"]] = (kind, ref["name"], ref["key"])
    return refs


def _secrets_of(container: dict) -> dict[str, tuple[str, str]]:
    return {n: (name, key) for n, (kind, name, key) in _env_refs(container).items() if kind == "secretKeyRef"}


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
        assert _secrets_of(c) == {"CLGATE_DATABASE_URL": ("clgate-db-owner", "url")}
    for d in manifests():
        if d["kind"] in ("Deployment", "StatefulSet") and d["metadata"]["name"].startswith("clgate"):
            for c in _containers(d):
                app_url = _secrets_of(c)["CLGATE_DATABASE_URL"]
                assert app_url == ("clgate-db-app", "url"), d["metadata"]["name"]


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

    from clgate.store.history import FAMILIES

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
        # the three hash chains and one head per family of the signed history
        assert conn.execute(text("SELECT count(*) FROM chain_heads")).scalar() == 3 + len(FAMILIES)
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


# ---------------------------------------------------------------------- schemas, offline
K8S_MINIMUM = "1.33.0"  # hostUsers (user namespaces) on by default; appArmorProfile; procMount


def _kubernetes_validate(doc: dict, version: str) -> None:
    import kubernetes_validate

    kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("version", [K8S_MINIMUM, "latest"])
def test_k8s_manifests_validate_against_the_kubernetes_schemas(version):
    import kubernetes_validate

    version = kubernetes_validate.latest_version() if version == "latest" else version
    checked = set()
    for doc in manifests():
        if doc["apiVersion"].split("/")[0] in ("keda.sh", "monitoring.coreos.com"):
            continue  # custom resources: their schemas come with the operators, not with Kubernetes
        _kubernetes_validate(doc, version)
        checked.add(doc["kind"])
    assert {"Deployment", "Job", "StatefulSet", "ConfigMap", "Service", "NetworkPolicy"} <= checked


def test_the_k8s_validator_catches_a_misspelt_field():
    import kubernetes_validate

    docs = {(d["kind"], d["metadata"]["name"]): d for d in manifests()}
    worker = docs[("Deployment", "clgate-worker-cpu")]
    worker["spec"]["template"]["spec"]["containers"][0]["securityContext"]["procMout"] = "Unmasked"
    with pytest.raises(kubernetes_validate.ValidationError):
        _kubernetes_validate(worker, K8S_MINIMUM)


def _compose_errors(doc: dict) -> list[str]:
    """Where ``doc`` breaks the compose specification (check-jsonschema's vendored copy, offline)."""
    from importlib import resources

    import jsonschema

    vendor = resources.files("check_jsonschema.builtin_schemas.vendor")
    schema = json.loads(vendor.joinpath("compose-spec.json").read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(doc)]


def test_compose_file_validates_against_the_compose_spec():
    assert _compose_errors(compose()) == []
    broken = compose()
    broken["services"]["worker-cpu"]["security_opts"] = broken["services"]["worker-cpu"].pop("security_opt")
    assert any("security_opts" in e for e in _compose_errors(broken))


def test_docker_compose_config_accepts_the_file(tmp_path):
    """The real parser too, where the compose plugin is installed (it is not everywhere: the schema
    test above runs in any case)."""
    import shutil
    import subprocess

    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "compose", "version"], capture_output=True).returncode:
        pytest.skip("no docker compose plugin here; the compose-spec schema test covers the file")
    env_file = tmp_path / ".env"
    env_file.write_text((DEPLOY / "env.example").read_text())
    compose_file = str(DEPLOY / "docker-compose.yml")
    r = subprocess.run(
        [docker, "compose", "--env-file", str(env_file), "-f", compose_file, "config", "-q"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr


# ---------------------------------------------------------------------- confinement, statically
def _deploy_texts() -> dict[str, str]:
    texts = {}
    for path in sorted(DEPLOY.rglob("*")):
        if path.is_file():
            try:
                texts[str(path.relative_to(DEPLOY))] = path.read_text()
            except UnicodeDecodeError:
                continue
    return texts


def test_nothing_under_deploy_turns_confinement_off():
    texts = _deploy_texts()
    assert "docker-compose.yml" in texts and "k8s/worker-cpu.yaml" in texts and "Dockerfile" in texts
    for name, text in texts.items():
        assert "ALLOW_UNCONFINED" not in text, name  # the laptop-only escape hatch, nowhere in deploy/
        assert not re.search(r"seccomp[=:]\s*unconfined", text, re.IGNORECASE), name
        assert not re.search(r"privileged:\s*true", text), name
        assert not re.search(r"allowPrivilegeEscalation:\s*true", text), name
        assert not re.search(r"CLGATE_SANDBOX\W+(auto|none)\b", text), name
        assert "cap_add" not in text and "add: [" not in text, name
    for doc in manifests():
        if doc["kind"] in ("Deployment", "StatefulSet", "Job"):
            pod = doc["spec"]["template"]["spec"]
            assert pod.get("securityContext", {}).get("seccompProfile", {}).get("type") != "Unconfined"


def _runs_worker(command: list[str] | None) -> bool:
    return bool(command) and command[:2] == ["clgate", "worker"]


def test_every_worker_runs_jobs_in_bwrap_under_the_shipped_seccomp_profile():
    profile = DEPLOY / "seccomp" / "clgate-worker.json"
    services = compose()["services"]
    workers = {n: s for n, s in services.items() if _runs_worker(s.get("command"))}
    assert set(workers) == {"worker-gpu", "worker-cpu"}
    for name, svc in workers.items():
        assert svc["environment"]["CLGATE_SANDBOX"] == "bwrap", name
        assert svc["cap_drop"] == ["ALL"] and svc["read_only"] is True, name
        opts = svc["security_opt"]
        assert "no-new-privileges:true" in opts and "systempaths=unconfined" in opts, name
        seccomp = [o.split("=", 1)[1] for o in opts if o.startswith("seccomp=")]
        assert seccomp and (DEPLOY / seccomp[0]).resolve() == profile.resolve(), name
    for name, svc in services.items():  # the API and the exporter never run a model: Celery mode
        if svc.get("command", [""])[:2] in (["clgate", "serve"], ["clgate", "exporter"]):
            assert svc["environment"]["CLGATE_BROKER_URL"].startswith("redis://"), name
    k8s_workers = [d for d in manifests() if any(_runs_worker(c.get("command")) for c in _containers(d))]
    assert {d["metadata"]["name"] for d in k8s_workers} == {"clgate-worker-gpu", "clgate-worker-cpu"}
    for d in k8s_workers:
        pod = d["spec"]["template"]["spec"]
        seccomp = pod["securityContext"]["seccompProfile"]
        assert seccomp["type"] == "Localhost" and Path(seccomp["localhostProfile"]).name == profile.name
        assert pod["automountServiceAccountToken"] is False and pod["hostUsers"] is False
        for c in _containers(d):
            context = c["securityContext"]
            assert context["procMount"] == "Unmasked" and context["capabilities"] == {"drop": ["ALL"]}
            assert context["allowPrivilegeEscalation"] is False
            assert {"name": "CLGATE_SANDBOX", "value": "bwrap"} in c["env"]
    for d in manifests():
        if d["kind"] == "Deployment" and d["metadata"]["name"] in ("clgate-api", "clgate-exporter"):
            assert _secrets_of(_containers(d)[0])["CLGATE_BROKER_URL"] == ("clgate-broker", "url")


def test_every_workload_lists_its_environment_and_gets_only_its_credentials():
    services = compose()["services"]
    owner = {n for n, s in services.items() if "clgate_owner" in json.dumps(s.get("environment", {}))}
    assert owner == {"migrate", "grant"}
    owner_password = {n for n, s in services.items() if "CLGATE_OWNER_PASSWORD" in json.dumps(s)}
    assert owner_password == {"migrate", "grant", "postgres"}  # postgres makes the role with it
    assert {n for n, s in services.items() if "CLGATE_BOOTSTRAP_ADMIN_KEY" in json.dumps(s)} == {"api"}
    for name, svc in services.items():
        assert "env_file" not in svc, name
        if svc.get("command", [""])[0] == "clgate":
            assert isinstance(svc["environment"], dict), name
    where: dict[str, set[str]] = {}
    for d in manifests():
        for c in _containers(d):
            assert "envFrom" not in c, (d["metadata"]["name"], c["name"])  # every variable named in env
            for ref, _key in _secrets_of(c).values():
                where.setdefault(ref, set()).add(d["metadata"]["name"])
    assert where == {
        "clgate-db-owner": {"clgate-migrate"},
        "clgate-db-app": {"clgate-api", "clgate-exporter", "clgate-worker-gpu", "clgate-worker-cpu"},
        "clgate-broker": {"clgate-api", "clgate-exporter", "clgate-worker-gpu", "clgate-worker-cpu"},
        "clgate-bootstrap-admin": {"clgate-api"},
    }
    texts = _deploy_texts()
    for name, text in texts.items():
        if "clgate-db-owner" in text:
            assert name in ("k8s/migrate-job.yaml", "k8s/config.yaml"), name


SIGNERS_COMPOSE = {"api", "worker-gpu", "worker-cpu"}
SIGNERS_K8S = {"clgate-api", "clgate-worker-gpu", "clgate-worker-cpu"}


def test_compose_gives_the_signing_key_file_to_exactly_the_api_and_the_workers():
    doc = compose()
    assert doc["secrets"]["clgate-signing-key"] == {"file": "./secrets/signing.key"}
    services = doc["services"]
    given = {n for n, s in services.items() if "CLGATE_SIGNING_KEY_FILE" in (s.get("environment") or {})}
    assert given == SIGNERS_COMPOSE
    for name in SIGNERS_COMPOSE:
        mounted = {s["source"]: s["target"] for s in services[name].get("secrets", [])}
        assert mounted == {"clgate-signing-key": services[name]["environment"]["CLGATE_SIGNING_KEY_FILE"]}
    for name, svc in services.items():  # migrate, grant, the exporter: neither the file nor the setting
        if name not in SIGNERS_COMPOSE:
            assert "signing" not in json.dumps(svc).lower(), name


def _secret_files(doc: dict, container: dict) -> dict[str, tuple[str, str]]:
    """``{file path in the container: (Secret name, key)}`` of the Secret volumes ``container`` mounts."""
    secrets = {
        v["name"]: v["secret"] for v in doc["spec"]["template"]["spec"].get("volumes", []) if "secret" in v
    }
    files = {}
    for mount in container.get("volumeMounts", []):
        secret = secrets.get(mount["name"])
        if secret is not None:
            assert mount.get("readOnly") is True, (doc["metadata"]["name"], mount)
            for item in secret["items"]:
                files[f"{mount['mountPath']}/{item['path']}"] = (secret["secretName"], item["key"])
    return files


def test_k8s_gives_the_signing_key_file_to_exactly_the_api_and_the_workers():
    where: dict[str, set[str]] = {}
    for d in manifests():
        for c in _containers(d):
            name = d["metadata"]["name"]
            files = _secret_files(d, c) if "template" in d.get("spec", {}) else {}
            for path, (secret, key) in files.items():
                where.setdefault(secret, set()).add(name)
                # made from a file by the command config.yaml shows
                assert f"create secret generic {secret} --from-file={key}=" in config_text(), secret
                assert {"name": "CLGATE_SIGNING_KEY_FILE", "value": path} in c["env"], name
            setting = [e for e in c.get("env", []) if e["name"] == "CLGATE_SIGNING_KEY_FILE"]
            assert bool(setting) == (name in SIGNERS_K8S), name
            if name not in SIGNERS_K8S:  # the migrate Job and the exporter hold no signing key
                assert "signing" not in json.dumps(d).lower(), name
    assert where == {"clgate-signing-key": SIGNERS_K8S}
    api = next(d for d in manifests() if d["metadata"]["name"] == "clgate-api" and d["kind"] == "Deployment")
    # the image's user reads the Secret's file (0440) through the pod's group
    assert api["spec"]["template"]["spec"]["securityContext"]["fsGroup"] == 10001
    for d in manifests():
        for v in d.get("spec", {}).get("template", {}).get("spec", {}).get("volumes", []):
            if "secret" in v:
                assert v["secret"]["defaultMode"] == 0o440, d["metadata"]["name"]


# ---------------------------------------------------------------------- the seccomp profile
PROFILE = DEPLOY / "seccomp" / "clgate-worker.json"
SECCOMP_EXEC = Path(__file__).with_name("seccomp_exec.py")
# what bwrap needs beyond Docker's default profile in a container without capabilities (each one is
# shown to be needed below); docs/service.md, "Confinement in deployment", says why
FOR_BWRAP = {"clone", "unshare", "mount", "umount2", "pivot_root"}
# what stays refused: kernel attack surface, other processes' memory, keys, modules, mount API v2, setns
NEVER = {
    *("bpf", "perf_event_open", "ptrace", "process_vm_readv", "process_vm_writev", "userfaultfd"),
    *("keyctl", "add_key", "request_key", "init_module", "finit_module", "kexec_load", "reboot", "swapon"),
    *("open_by_handle_at", "setns", "chroot", "fsopen", "fsmount", "move_mount", "open_tree", "syslog"),
}


def _profile() -> dict:
    return json.loads(PROFILE.read_text())


def test_seccomp_profile_is_docker_format_and_adds_only_what_bwrap_needs():
    profile = _profile()
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO" and profile["defaultErrnoRet"] == 1
    assert {a["architecture"] for a in profile["archMap"]} == {"SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64"}
    allowed: set[str] = set()
    for rule in profile["syscalls"]:
        assert set(rule) <= {"names", "action", "errnoRet", "args", "includes", "excludes", "comment"}, rule
        assert rule["action"] in ("SCMP_ACT_ALLOW", "SCMP_ACT_ERRNO") and rule["names"]
        assert not (rule.get("includes") or {}).get("caps"), "the worker holds no capability"
        if rule["action"] == "SCMP_ACT_ALLOW":
            allowed |= set(rule["names"])
        if set(rule["names"]) & FOR_BWRAP:
            assert rule["comment"].startswith("clgate/bwrap: ") and "args" not in rule, rule
    assert allowed >= FOR_BWRAP
    assert not allowed & NEVER, allowed & NEVER
    clone3 = next(r for r in profile["syscalls"] if r["names"] == ["clone3"])
    assert clone3["action"] == "SCMP_ACT_ERRNO" and clone3["errnoRet"] == 38  # ENOSYS: falls back to clone


@pytest.fixture
def seccomp_bwrap(require_binary):
    """bwrap and libseccomp (PyPI pyseccomp): skipped on a workstation without them, failed in CI."""
    require_binary("bwrap", "bubblewrap")
    try:
        import pyseccomp  # noqa: F401
    except (ImportError, OSError) as exc:  # the module loads libseccomp.so.2 when imported
        import os

        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"libseccomp is needed in CI: {exc}")
        pytest.skip(f"libseccomp not available: {exc}")


PROBE = r"""
import ctypes, json, os, sys
out, data = sys.argv[2], sys.argv[-1]
libc = ctypes.CDLL(None, use_errno=True)
found = {
    "uid": os.getuid(),
    "env": sorted(os.environ),
    "data": os.path.exists(data),
    "pid": os.getpid(),
    "proc": os.path.exists("/proc/self/status"),
    "nested_userns": libc.unshare(0x10000000) == 0,
}
open(os.path.join(out, "result.json"), "w").write(json.dumps(found))
"""


def _under_profile(monkeypatch, drop: tuple[str, ...] = ()) -> None:
    """Every child the sandbox starts from here on runs bwrap under the shipped profile."""
    import sys

    from clgate.workers import sandbox

    real = sandbox.child_argv
    prefix = [sys.executable, str(SECCOMP_EXEC), str(PROFILE)]
    for name in drop:
        prefix += ["--drop", name]

    def wrapped(*args, **kwargs):
        argv, env = real(*args, **kwargs)
        return [*prefix, "--", *argv], env

    monkeypatch.setattr(sandbox, "child_argv", wrapped)


def _run_probe(tmp_path, monkeypatch, drop: tuple[str, ...] = ()):
    """The probe run as the engine's child by the worker's bubblewrap launcher, under the profile:
    (its exit status and what it found, or None) and the child's log."""
    import json
    from types import SimpleNamespace

    from clgate.engine.runner import ChildLaunch
    from clgate.workers import sandbox

    settings = Settings(data_dir=tmp_path / "data", sandbox="bwrap")
    settings.data_dir.mkdir()
    (settings.data_dir / "admin.key").write_text("clg_not_for_the_job\n")
    monkeypatch.setenv("CLGATE_DATABASE_URL", "postgresql+psycopg://clgate_app:pw@db/clgate")
    monkeypatch.setattr(sandbox, "CHILD_COMMAND", ["-c", PROBE])
    _under_profile(monkeypatch, drop)
    real = sandbox.child_argv  # the probe's last argument: the data folder it must not see
    data = str(settings.data_dir)

    def with_data(*a, **k):
        argv, env = real(*a, **k)
        return [*argv, data], env

    monkeypatch.setattr(sandbox, "child_argv", with_data)
    work, stage, out = tmp_path / "work", tmp_path / "stage", tmp_path / "out"
    for folder in (work, stage, out):
        folder.mkdir()
    proc = sandbox.SandboxLauncher(settings, "bwrap", work, gpu=False)(
        ChildLaunch(stage, out, threads=1, gpu=False)
    )
    proc.communicate(timeout=60)
    found = out / "result.json"
    report = json.loads(found.read_text()) if found.is_file() else None
    log = (work / "child.log").read_text(errors="replace") if (work / "child.log").exists() else ""
    return SimpleNamespace(returncode=proc.returncode, report=report), log


def test_the_sandbox_child_starts_in_bwrap_under_the_shipped_profile(tmp_path, monkeypatch, seccomp_bwrap):
    result, log = _run_probe(tmp_path, monkeypatch)
    assert result.returncode == 0 and result.report is not None, log
    found = result.report
    assert found["uid"] == 65534 and found["proc"] and found["pid"] < 10  # own PID namespace, own /proc
    assert not any(k.startswith("CLGATE") for k in found["env"]), found["env"]
    assert found["data"] is False  # no database, artifact store nor key file
    assert found["nested_userns"] is False  # --disable-userns: no namespace of its own to escape into


@pytest.mark.parametrize("syscall", sorted(FOR_BWRAP))
def test_each_syscall_the_profile_adds_is_needed(tmp_path, monkeypatch, seccomp_bwrap, syscall):
    result, log = _run_probe(tmp_path, monkeypatch, drop=(syscall,))
    assert result.returncode != 0 and result.report is None
    assert "bwrap" in log, log


@pytest.mark.slow
def test_the_worker_job_path_runs_under_the_shipped_profile(seccomp_bwrap):
    """The sandbox's own tests of a real job (store, staging, bwrap child, TorchScript model, the
    leak probe), run in a process under the profile, as a worker container runs them."""
    import os
    import subprocess
    import sys

    r = subprocess.run(
        [
            *(sys.executable, str(SECCOMP_EXEC), str(PROFILE), "--"),
            *(sys.executable, "-m", "pytest", "tests/workers/test_sandbox.py", "-q", "-n", "0"),
            *("-p", "no:cacheprovider", "-k", "confines_a_model or sees_no_network"),
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and "skipped" not in r.stdout, r.stdout[-2000:]
