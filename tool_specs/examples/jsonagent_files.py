"""The file-reader example tool, confined to one root directory.

The root is $JSONAGENT_FILES_ROOT, or the working directory. A path is resolved (symlinks
and `..` included) before it is checked, so nothing outside the root can be read.
"""

from __future__ import annotations

import os
from pathlib import Path

from jsonagent import ToolError


def root() -> Path:
    return Path(os.environ.get("JSONAGENT_FILES_ROOT") or os.getcwd()).resolve()


def read_file(path: str, max_chars: int = 20000) -> dict:
    base = root()
    target = (base / path).resolve()
    if target != base and base not in target.parents:
        raise ToolError(f"{path!r} is outside the readable root {str(base)!r}; give a path "
                        "relative to it")
    if target.is_dir():
        names = sorted(p.name + ("/" if p.is_dir() else "") for p in target.iterdir())
        return {"path": path, "directory": names[:500]}
    try:
        data = target.read_bytes()
    except FileNotFoundError:
        raise ToolError(f"no file {path!r} under the root") from None
    except OSError as exc:
        raise ToolError(f"cannot read {path!r}: {exc.strerror or exc}") from None
    if b"\0" in data[:4096]:
        raise ToolError(f"{path!r} is a binary file ({len(data)} bytes); this tool reads text")
    text = data.decode("utf-8", "replace")
    out = {"path": path, "text": text[:max_chars]}
    if len(text) > max_chars:
        out["truncated"] = f"showing {max_chars} of {len(text)} characters"
    return out
