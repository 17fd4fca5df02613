"""Resource limits: the settings a caller can tune, and their application in the worker."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Limits:
    """Limits beyond `memory_mb` and `timeout`; the defaults suit a code-interpreter tool."""

    disk_mb: int = 512
    """Total size of the workdir (a tmpfs inside the mount namespace); also the per-file cap."""
    max_files: int = 10_000
    """Inodes in the workdir, so a flood of empty files cannot stall the file sync."""
    nproc: int = 64
    """Processes and threads the sandbox may hold at once (counted inside its user namespace)."""
    nofile: int = 256
    cpu_s: int = 3600
    """CPU seconds for the worker's whole life; the wall-clock timeout bounds each call."""
    grace_s: float = 1.0
    """After a timeout's interrupt, how long to wait before killing the worker."""

    def to_dict(self) -> dict:
        return asdict(self)


def apply(limits: Limits, memory_mb: int, extra_nproc: int = 0) -> dict[str, int]:
    """Set soft and hard limits on this process (inherited by its children); returns what was set.

    `extra_nproc` is the number of processes the user already owns when there is no
    user namespace to count ours apart.
    """
    import resource

    memory = memory_mb * 1024 * 1024
    wanted = {
        "AS": memory,
        "DATA": memory,
        "FSIZE": limits.disk_mb * 1024 * 1024,
        "NOFILE": limits.nofile,
        "CORE": 0,
        "CPU": limits.cpu_s,
        "NPROC": limits.nproc + extra_nproc,
    }
    applied = {}
    for name, value in wanted.items():
        which = getattr(resource, "RLIMIT_" + name, None)
        if which is None:
            continue
        soft, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            continue
        applied[name] = value
    return applied
