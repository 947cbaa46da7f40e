"""A database or data folder the settings point at but that cannot be reached or used is the operator's
to fix: exit 2 naming the setting and the host (password hidden), never "internal error … a bug"."""

from __future__ import annotations

import subprocess

import pytest

from tests.fixtures.cli import run_clgate
from tests.fixtures.service import free_port

_clgate = run_clgate


def _assert_operator_error(done: subprocess.CompletedProcess[str], setting: str, *needles: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith(f"error: {setting} ("), done.stderr
    assert "bug in clgate" not in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    for needle in needles:
        assert needle in done.stderr, done.stderr


@pytest.mark.parametrize(
    "command",
    [["db", "upgrade"], ["serve", "--port", "0"], ["keys", "create", "--name", "ci", "--role", "admin"]],
)
def test_a_refused_database_port_names_the_setting_and_host(command, tmp_path):
    port = free_port()  # nothing listens there
    url = f"postgresql+psycopg://app:s3cret@127.0.0.1:{port}/clgate"
    done = _clgate(*command, env={"CLGATE_DATABASE_URL": url, "CLGATE_DATA_DIR": str(tmp_path)}, cwd=tmp_path)
    _assert_operator_error(done, "CLGATE_DATABASE_URL", f"127.0.0.1:{port}", "refused")
    assert "s3cret" not in done.stderr


def test_wrong_credentials_name_the_setting_and_host(postgres_url, tmp_path):
    url = postgres_url.replace("://clgate@", "://intruder:wrong@")
    done = _clgate(
        "db", "upgrade", env={"CLGATE_DATABASE_URL": url, "CLGATE_DATA_DIR": str(tmp_path)}, cwd=tmp_path
    )
    _assert_operator_error(done, "CLGATE_DATABASE_URL", "intruder", '"intruder"')
    assert "wrong" not in done.stderr.replace("intruder", "")
    # the same server with the right role migrates: the error above was the credentials
    done = _clgate(
        "db",
        "upgrade",
        env={"CLGATE_DATABASE_URL": postgres_url, "CLGATE_DATA_DIR": str(tmp_path)},
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr


def test_an_unusable_data_folder_names_clgate_data_dir(tmp_path):
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("")
    done = _clgate("db", "upgrade", "--data-dir", str(blocked / "data"), env={}, cwd=tmp_path)
    _assert_operator_error(done, "CLGATE_DATA_DIR", str(blocked))


def test_a_refused_broker_port_stops_the_worker_naming_the_setting_and_host(tmp_path):
    port = free_port()  # nothing listens there: Celery alone would retry it forever
    url = f"redis://:s3cret@127.0.0.1:{port}/0"
    env = {"CLGATE_BROKER_URL": url, "CLGATE_DATA_DIR": str(tmp_path), "CLGATE_SANDBOX": "auto"}
    done = _clgate("worker", "--queues", "cpu", env=env, cwd=tmp_path)
    _assert_operator_error(done, "CLGATE_BROKER_URL", f"127.0.0.1:{port}", "refused")
    assert "s3cret" not in done.stderr


def test_a_reachable_broker_passes_the_workers_check(redis_url):
    from clgate.cli.service_cmd import _check_broker

    _check_broker(redis_url)  # returns: no exit, the worker would go on to start Celery
