"""Plug-ins installed for a test only, never into the repository's .venv (other tests would see them).

- ``example_site``: the example package ``examples/plugins/clgate-example-metrics`` built and installed by
  pip (``--target``, offline, no build isolation: the venv's setuptools) into a temporary folder, once per
  session — a real install from its ``pyproject.toml``, entry points included.
- ``make_plugin``: a hand-made distribution (a module and a ``.dist-info`` with ``entry_points.txt``) in a
  temporary folder: the broken plug-ins.
- ``plugins_on``: puts such folders on ``sys.path`` for one test and reloads the plug-ins (in-process);
  subprocess runs get them through ``PYTHONPATH`` (``site_env``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from clgate.metrics.registry import reload_plugins
from clgate.policy import plugins as rule_plugins

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "plugins" / "clgate-example-metrics"


@pytest.fixture(scope="session")
def example_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example plug-in package, pip-installed into a temporary folder (built from a copy)."""
    tmp = tmp_path_factory.mktemp("example-plugin")
    source = tmp / "src-copy"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("*.egg-info", "build", "__pycache__"))
    site = tmp / "site"
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
    done = subprocess.run(
        [*cmd, "--target", str(site), str(source)], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert list(site.glob("clgate_example_metrics-*.dist-info/entry_points.txt"))
    return site


def reload_all() -> None:
    reload_plugins()
    rule_plugins.reload()


@pytest.fixture
def plugins_on(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """``plugins_on(folder, …)``: those folders on sys.path, the plug-ins found again; undone after."""
    monkeypatch.delenv("CLGATE_PLUGINS", raising=False)

    def on(*folders: Path) -> None:
        for folder in folders:
            monkeypatch.syspath_prepend(str(folder))
        reload_all()

    yield on
    monkeypatch.undo()
    reload_all()


@pytest.fixture
def make_plugin(tmp_path: Path) -> Callable[..., Path]:
    """``make_plugin(dist, source, metrics={name: "module:attr"}, rules={…})``: a folder holding the module
    ``<dist with _>.py`` (``source``) and its ``.dist-info``; returns the folder."""

    def make(
        dist: str,
        source: str,
        *,
        metrics: dict[str, str] | None = None,
        rules: dict[str, str] | None = None,
        version: str = "1.0",
    ) -> Path:
        folder = tmp_path / f"site-{dist}"
        folder.mkdir()
        (folder / f"{dist.replace('-', '_')}.py").write_text(textwrap.dedent(source))
        info = folder / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        lines = []
        for group, entries in (("clgate.metrics", metrics), ("clgate.rules", rules)):
            if entries:
                lines += [f"[{group}]", *(f"{k} = {v}" for k, v in entries.items()), ""]
        (info / "entry_points.txt").write_text("\n".join(lines))
        return folder

    return make


def site_env(*folders: Path) -> dict[str, str]:
    """The environment of a subprocess ``clgate`` that finds the plug-ins in ``folders``."""
    return {"PYTHONPATH": ":".join(str(f) for f in folders)}
