"""The "mcpServers" config file that other MCP clients use, read entry by entry."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..calls import EFFECTS
from ..errors import ConfigError, read_text


def config_entries(path: str | Path) -> Iterator[tuple[str | list[str], dict[str, Any]]]:
    """Each server of the file as (target, MCPServer keywords). An entry is checked when it is
    taken, so a bad one is reported after the servers before it were built."""
    from .handlers import resolve_secrets

    path = Path(path)
    try:
        data = json.loads(read_text(path, ConfigError, "MCP config"))
    except ValueError as exc:
        raise ConfigError(f"{path}: not a JSON MCP config: {exc}") from None
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise ConfigError(f'{path}: expected {{"mcpServers": {{NAME: {{...}}}}}}')
    for name, entry in servers.items():
        where = f"{path}: mcpServers.{name}"
        if not isinstance(entry, dict) or ("command" in entry) == ("url" in entry):
            raise ConfigError(f"{where}: give either command (with args, env) or url "
                              "(with headers)")
        values = {k: resolve_secrets(str(v), f"{where}.env.{k}")
                  for k, v in (entry.get("env") or entry.get("headers") or {}).items()}
        effects = entry.get("effects")  # what running its tools' calls twice does (calls.py)
        if effects is not None and effects not in EFFECTS:
            raise ConfigError(f"{where}: effects is one of {', '.join(EFFECTS)}, not {effects!r}")
        common = {"name": name, **({"effects": effects} if effects else {})}
        if "url" in entry:
            yield entry["url"], {**common, "headers": values}
        else:
            args = entry.get("args", [])
            if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
                raise ConfigError(f"{where}: args must be a list of strings")
            yield [entry["command"], *args], {**common, "env": values, "cwd": entry.get("cwd")}
