"""Every command's help reads as sentences: no Python type names, no text eaten as rich markup."""

from __future__ import annotations

import pytest
import typer
from rich.text import Text
from typer.testing import CliRunner

from clgate.cli import app

runner = CliRunner()


def _commands(command, path=()):
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


COMMANDS = list(_commands(typer.main.get_command(app)))


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=lambda p: " ".join(p) or "clgate")
def test_help_shows_no_python_type_names(path):
    res = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    for python_name in ("<bool>", "<list[", "NoneType", "Optional["):
        assert python_name not in res.output, f"{' '.join(path)} --help shows {python_name}:\n{res.output}"


@pytest.mark.parametrize("path, command", COMMANDS, ids=lambda v: " ".join(v) if isinstance(v, tuple) else "")
def test_help_texts_survive_rich_markup(path, command):
    """Brackets in a help text are read as rich markup tags and vanish ("weights for , comma-separated")."""
    texts = [command.help or ""] + [getattr(param, "help", None) or "" for param in command.params]
    for text in texts:
        assert Text.from_markup(text).plain == text, (
            f"{' '.join(path)}: rich would render {text!r} differently"
        )


def test_the_weights_help_names_the_criteria():
    res = runner.invoke(app, ["metrics", "--help"], env={"COLUMNS": "400"})
    assert "a_lifetime, rem, bwt_plus, fwt_lifetime, ms, sss, ce" in res.output
