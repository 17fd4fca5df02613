"""The help a person reads, pinned: a change to it is a decision, not an accident.

Regenerate after a deliberate change with JSONAGENT_UPDATE_SNAPSHOTS=1 python -m pytest tests/test_cli_help.py
"""

import os
import re

import pytest

from test_cli import cli

SNAPSHOTS = os.path.join(os.path.dirname(__file__), "snapshots")
COMMANDS = [[], ["run"], ["chat"], ["resume"], ["sessions"], ["tools"], ["models"], ["batch"],
            ["serve"], ["sandbox"]]


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
        assert not re.search(r"<list\[|<str>|<path>|\{[a-z_]+\}", help_text), (command, help_text)
