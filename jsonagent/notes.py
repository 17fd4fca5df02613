"""The text the model reads, as package data (prompts/): the templates and every note."""

from __future__ import annotations

import functools
import json
from pathlib import Path

# a plain path, not importlib.resources: that module pulls in tempfile and shutil (~5 ms of
# every start), and the package is always installed as files (the wheel test checks it)
PROMPTS = Path(__file__).resolve().parent / "prompts"


@functools.lru_cache(maxsize=8)
def template(name: str) -> str:
    return (PROMPTS / name).read_text("utf-8")


def note(name: str, **fields: object) -> str:
    """A note for the model, from prompts/notes.json."""
    return _notes()[name].format(**fields)


def template_of(name: str) -> str:
    """A note's words before its fields are filled in."""
    return _notes()[name]


@functools.lru_cache(maxsize=1)
def _notes() -> dict[str, str]:
    return json.loads(template("notes.json"))
