"""Every exception the sandbox raises on purpose. Code that fails inside is a result, not one of these.

    SandboxError                 the supervisor itself could not do its job
    ├── IsolationUnavailable     require_isolation=True and a protection is missing here
    ├── SandboxStartError        the worker could not be started (bad workdir, interpreter, quota)
    └── SandboxClosed            run() after close()

    IsolationWarning             (a RuntimeWarning) emitted once when running with weaker isolation
"""

from __future__ import annotations


class SandboxError(Exception):
    """Base class; `str(err)` is a single line fit to show a person."""


class IsolationUnavailable(SandboxError):
    def __init__(self, missing: list[str], report=None) -> None:
        self.missing = missing
        self.report = report
        super().__init__("sandbox isolation incomplete on this machine, missing: " + ", ".join(missing)
                         + " (run `jsonagent sandbox check` for details)")


class SandboxStartError(SandboxError):
    pass


class SandboxClosed(SandboxError):
    pass


class IsolationWarning(RuntimeWarning):
    pass
