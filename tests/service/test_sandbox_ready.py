"""/readyz says how the embedded executor confines submitted models (bwrap, unconfined, unavailable)."""

from __future__ import annotations

import pytest


def _ready(app_factory, test_client_class, **settings):
    app, _ = app_factory(**settings)
    with test_client_class(app) as client:
        return client.get("/readyz")


def test_readyz_reports_bwrap(app_factory, test_client_class, require_binary):
    require_binary("bwrap", "bubblewrap")
    r = _ready(app_factory, test_client_class)
    assert r.status_code == 200 and r.json()["checks"]["sandbox"] == "bwrap"


def test_readyz_says_loudly_when_models_run_unconfined(app_factory, test_client_class, caplog):
    with caplog.at_level("WARNING", logger="clgate.sandbox"):
        r = _ready(app_factory, test_client_class, sandbox="none", allow_unconfined=True)
    assert r.status_code == 200 and r.json()["checks"]["sandbox"].startswith("UNCONFINED")
    assert "RUN UNCONFINED" in caplog.text


@pytest.mark.parametrize(("mode", "status"), [("none", 200), ("bwrap", 503)])
def test_readyz_without_a_sandbox(app_factory, test_client_class, monkeypatch, caplog, mode, status):
    import shutil

    from clgate.workers import sandbox

    real_which = shutil.which
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None if name == "bwrap" else real_which(name))
    with caplog.at_level("WARNING", logger="clgate.sandbox"):
        r = _ready(app_factory, test_client_class, sandbox=mode)
    assert r.status_code == status
    assert r.json()["checks"]["sandbox"].startswith("unavailable")
    assert "SANDBOX UNAVAILABLE" in caplog.text
