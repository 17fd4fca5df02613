"""What ships inside jsonagent but lives beside it in the repository: the sandbox package,
`tool_specs/` and `core_function.json`.

The wheel maps them under `jsonagent/` at build time (pyproject.toml), so that an installed
jsonagent owns one top-level name and its `sandbox` cannot collide with another distribution's.
A checkout, and its editable install (which puts the repository root on sys.path), keeps them
at the top. Everything that needs them asks here, and so works in both layouts:

    from jsonagent.bundled import sandbox        # the package, imported on first use
    bundled.path("tool_specs", "meta_schema.json")
"""

from __future__ import annotations

import functools
import importlib
from pathlib import Path
from types import ModuleType

_PACKAGE = Path(__file__).parent


@functools.cache
def _installed() -> bool:
    return (_PACKAGE / "sandbox").is_dir()


def path(*parts: str) -> Path:
    """A bundled file or folder: `path("core_function.json")`, `path("tool_specs", "examples")`."""
    return (_PACKAGE if _installed() else _PACKAGE.parent).joinpath(*parts)


def __getattr__(name: str) -> ModuleType:
    # the sandbox is imported only when a run needs it: `import jsonagent` stays light
    if name == "sandbox":
        return importlib.import_module("jsonagent.sandbox" if _installed() else "sandbox")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
