"""``clgate policy presets`` (the shipped policies, by name) and ``clgate init`` (a starter policy and CI
file written into the user's repository).

Both need only the base install: the presets and the CI templates are package data.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

import typer

# --ci → (the shipped template under clgate/examples/ci/, where init writes it in the repository)
CI_TEMPLATES: dict[str, tuple[str, str]] = {
    "github": ("github-actions.yml", ".github/workflows/clgate.yml"),
    "gitlab": ("gitlab-ci.yml", ".gitlab-ci.yml"),
}
STARTER_PRESET = "starter"
POLICY_FILE = "clgate-policy.yaml"
# the line of each template that pins clgate's version: init pins the version that wrote it
_PINNED = re.compile(r'CLGATE_VERSION: "[^"]*"')


def presets_command() -> None:
    """List the shipped policies; use one with --policy preset:NAME (clgate gate)."""
    from rich.console import Console
    from rich.table import Table

    # lazy: CLI — `clgate --help` loads no command's dependencies
    from clgate.presets import preset_names, preset_summary

    table = Table(title="shipped policies (--policy preset:NAME)")
    table.add_column("name", no_wrap=True)
    table.add_column("what it checks")
    for name in preset_names():
        table.add_row(f"preset:{name}", preset_summary(name))
    Console().print(table)


def _template(name: str) -> str:
    from importlib.resources import files

    # lazy: CLI — `clgate --help` loads no command's dependencies
    from clgate._version import __version__

    text = files("clgate.examples").joinpath("ci", name).read_text(encoding="utf-8")
    return _PINNED.sub(f'CLGATE_VERSION: "{__version__}"', text)


def _plan(repo: Path, ci: str) -> dict[Path, str]:
    # lazy: CLI — `clgate --help` loads no command's dependencies
    from clgate.presets import preset_path

    template, target = CI_TEMPLATES[ci]
    return {
        repo / POLICY_FILE: preset_path(STARTER_PRESET).read_text(encoding="utf-8"),
        repo / target: _template(template),
    }


def init_command(
    ci: Annotated[
        Literal["github", "gitlab"],
        typer.Option(
            "--ci", help="The CI file to write: github (an Actions workflow) or gitlab (.gitlab-ci.yml)."
        ),
    ] = "github",
    repo: Annotated[
        Path, typer.Option("--repo", help="The repository to write into (default: the current directory).")
    ] = Path("."),
    force: Annotated[bool, typer.Option("--force", help="Overwrite files that already exist.")] = False,
) -> None:
    """Write a starter policy (clgate-policy.yaml) and a CI file that gates on it into a repository.

    Refuses to overwrite an existing file unless --force. The CI file expects the candidate's evaluation
    logs in eval-logs/ and, once a model is released, its log in released/log.json (the baseline).
    """
    if not repo.is_dir():
        typer.echo(f"error: --repo: {repo} is not a directory", err=True)
        raise typer.Exit(2)
    plan = _plan(repo, ci)
    existing = [path for path in plan if path.exists()]
    if existing and not force:
        names = ", ".join(str(p) for p in existing)
        typer.echo(f"error: {names} already exist(s); nothing written (--force overwrites)", err=True)
        raise typer.Exit(2)
    for path, text in plan.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        typer.echo(f"wrote {path}")
    typer.echo(
        "next: put the candidate's evaluation logs in eval-logs/ (clgate run, the Recorder, clgate import), "
        f"set the floors in {POLICY_FILE}, commit; after a release, copy its log to released/log.json "
        "(the baseline the regression rules compare with)."
    )


def register(app: typer.Typer) -> None:
    """Add ``policy presets`` and ``init`` to the root app."""
    policy = typer.Typer(help="The shipped policies.", no_args_is_help=True)
    policy.command("presets")(presets_command)
    app.add_typer(policy, name="policy")
    app.command("init")(init_command)
