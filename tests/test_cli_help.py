"""The help a person reads, pinned: a change to it is a decision, not an accident.

Regenerate after a deliberate change with JSONAGENT_UPDATE_SNAPSHOTS=1 python -m pytest tests/test_cli_help.py
"""

import os
import re

import pytest
import typer
from typer.testing import CliRunner

from jsonagent.cli.main import app
from test_cli import cli

SNAPSHOTS = os.path.join(os.path.dirname(__file__), "snapshots")
COMMANDS = [[], ["run"], ["chat"], ["resume"], ["sessions"], ["tools"], ["models"], ["batch"],
            ["serve"], ["sandbox"], ["tools", "call"], ["eval"], ["eval", "run"],
            ["eval", "compare"]]
# typer's own placeholders: {name} or [name] in the usage line, a Python type beside a name
ODD = re.compile(r"<(str|path|int|float|list\[)[^>]*>|\{[A-Za-z_]+\}|^Usage:.*\[[a-z_]+\]",
                 re.M)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: "-".join(c) or "jsonagent")
def test_help_matches_its_snapshot(command):
    proc = cli(*command, "--help", env={"COLUMNS": "100", "TERM": "dumb"})
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    path = os.path.join(SNAPSHOTS, "help-" + ("-".join(command) or "jsonagent") + ".txt")
    if os.environ.get("JSONAGENT_UPDATE_SNAPSHOTS"):
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    with open(path, encoding="utf-8") as f:
        assert text == f.read()


def test_no_description_is_cut_off_and_no_placeholder_is_odd():
    text = cli("--help", env={"COLUMNS": "100"}).stdout
    commands = text.split("Commands:")[1]
    assert "..." not in commands  # every one-line description fits
    for command in COMMANDS[1:]:
        help_text = cli(*command, "--help", env={"COLUMNS": "100"}).stdout
        assert not ODD.search(help_text), (command, help_text)


def _leaves(group, path=()):
    for name, command in group.commands.items():
        if isinstance(command, typer.core.TyperGroup):
            yield from _leaves(command, (*path, name))
        else:
            yield (*path, name)


def test_every_command_names_its_arguments_plainly():
    """Walked from the app, so a new command is checked too (`tools call` once slipped by)."""
    leaves = list(_leaves(typer.main.get_command(app)))
    assert ("tools", "call") in leaves and ("sandbox", "run") in leaves
    for path in leaves:
        result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "100"})
        assert result.exit_code == 0, (path, result.output)
        assert not ODD.search(result.output), (path, result.output)
