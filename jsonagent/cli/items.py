"""`resume --item ID=VALUE`: a person's input for one item of several a run waits for."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError


def each_item(given: list[str], pending: Any, reason: str | None) -> dict[str, dict] | None:
    """`ID=approve`, `ID=deny` (with --reason) or `ID=answer text`, by the item's id or the
    index of its call (`2` for `RUN.STEP.2`), as the library takes them (`Agent.resume`)."""
    if not given:
        return None
    ids = [item.id for item in pending.each if item.id] if pending is not None else []
    out: dict[str, dict] = {}
    for text in given:
        name, eq, value = text.partition("=")
        found = [i for i in ids if i in (name, f"{i.rsplit('.', 1)[0]}.{name}")]
        if not eq or not found:
            raise ConfigError(f"--item {text}: give ID=VALUE, where ID is one of "
                              f"{', '.join(ids) or 'nothing (the run waits for no items)'}")
        out[found[0]] = {"approve": True} if value == "approve" else \
            {"approve": False, "reason": reason} if value == "deny" else {"answer": value}
    return out
