"""The text the model reads, as package data (prompts/): the templates and every note."""

from __future__ import annotations

import functools
import json
from importlib.resources import files


@functools.lru_cache(maxsize=8)
def template(name: str) -> str:
    return files("jsonagent").joinpath("prompts", name).read_text("utf-8")


def note(name: str, **fields: object) -> str:
    """A note for the model, from prompts/notes.json."""
    return _notes()[name].format(**fields)


@functools.lru_cache(maxsize=1)
def _notes() -> dict[str, str]:
    return json.loads(template("notes.json"))
