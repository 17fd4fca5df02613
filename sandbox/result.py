"""What the sandbox reports back: one `ExecResult` per run, one `IsolationReport` per worker."""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ExecResult:
    """The outcome of one `Sandbox.run`. Errors in the code are data here, never exceptions."""

    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    stdout_bytes: int = 0
    """Bytes the code wrote to stdout, counted past the cap."""
    stderr_bytes: int = 0
    error: str | None = None
    """The traceback (or a one-line reason for a crash or timeout); None when the code succeeded."""
    exit_code: int | None = 0
    """0 on success, 1 on an exception, the code of `sys.exit`/`os._exit`, or -N for signal N."""
    timed_out: bool = False
    crashed: bool = False
    """The worker process died (segfault, os._exit, protocol violation); see `state_lost`."""
    state_lost: bool = False
    """The worker was restarted during this call: variables from earlier calls are gone."""
    duration_s: float = 0.0
    files_changed: tuple[str, ...] = ()
    """Files created or modified by this call, relative to the workdir."""

    @property
    def ok(self) -> bool:
        return self.error is None and self.exit_code == 0 and not (self.timed_out or self.crashed)

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["files_changed"] = list(self.files_changed)
        return data

    model_dump = to_dict


@dataclass(frozen=True)
class IsolationReport:
    """Which protections are actually in force for a sandbox on this machine."""

    platform: str
    namespaces: tuple[str, ...] = ()
    """Namespaces entered: a subset of user, pid, mount, ipc, uts, net."""
    fresh_proc: bool = False
    landlock_abi: int = 0
    """0 when Landlock is absent; otherwise the kernel ABI used for the file-system allowlist."""
    landlock_tcp: bool = False
    landlock_scoped: bool = False
    """Signals and abstract unix sockets are scoped to the sandbox (Landlock ABI >= 6)."""
    seccomp: bool = False
    capabilities_dropped: bool = False
    network: str = "unknown"
    network_allowed: bool = False
    rlimits: dict = field(default_factory=dict)
    disk_quota_mb: int | None = None
    process_cleanup: str = "process group"
    """How leftover processes are found and killed after each call."""
    warnings: tuple[str, ...] = ()

    def missing(self) -> list[str]:
        """Names of protections a strict sandbox needs that are not in force."""
        want = {"user", "pid", "mount", "ipc", "uts"} | (set() if self.network_allowed else {"net"})
        gaps = []
        if not want <= set(self.namespaces):
            gaps.append("namespaces (" + ", ".join(sorted(want - set(self.namespaces))) + ")")
        if self.landlock_abi < 1:
            gaps.append("landlock")
        if not self.seccomp:
            gaps.append("seccomp")
        if not self.capabilities_dropped:
            gaps.append("capabilities")
        if not {"AS", "FSIZE", "NOFILE", "CORE"} <= set(self.rlimits):
            gaps.append("rlimits")
        if not {"NPROC", "PIDS"} & set(self.rlimits):
            gaps.append("process count limit")
        if self.disk_quota_mb is None:
            gaps.append("disk quota")
        return gaps

    @property
    def complete(self) -> bool:
        return not self.missing()

    def lines(self) -> list[str]:
        def yes(flag: bool, detail: str = "") -> str:
            return ("yes" + (f" ({detail})" if detail else "")) if flag else "NO"

        landlock = "NO"
        if self.landlock_abi:
            extra = [f"ABI {self.landlock_abi}", "fs allowlist"]
            extra += ["tcp denied"] if self.landlock_tcp else []
            extra += ["signals+abstract sockets scoped"] if self.landlock_scoped else []
            landlock = "yes (" + ", ".join(extra) + ")"
        limits = ", ".join(f"{k}={v}" for k, v in self.rlimits.items()) or "none"
        if "PIDS" in self.rlimits:
            limits += " (PIDS: a cgroup pids.max, since NPROC never applies to root)"
        rows = [
            ("platform", self.platform),
            ("namespaces", ", ".join(self.namespaces) or "NONE"),
            ("fresh /proc", yes(self.fresh_proc)),
            ("landlock", landlock),
            ("seccomp", yes(self.seccomp, "deny list")),
            ("capabilities", "all dropped" if self.capabilities_dropped else "NOT dropped"),
            ("network", self.network),
            ("rlimits", limits),
            ("disk quota", f"{self.disk_quota_mb} MB tmpfs" if self.disk_quota_mb else "NONE (per-file limit only)"),
            ("process cleanup", self.process_cleanup),
        ]
        out = [f"{name:<16}{value}" for name, value in rows]
        out += [f"warning         {w}" for w in self.warnings]
        return out

    def describe(self) -> str:
        return "\n".join(self.lines())

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["complete"] = self.complete
        return data


def report_from_hellos(reaper: dict, worker: dict, network: bool, pids_max: int) -> IsolationReport:
    """Build the report from the hello frames of the reaper and of the worker."""
    namespaces = tuple(str(n) for n in reaper.get("namespaces") or ())
    landlock = worker.get("landlock") if isinstance(worker.get("landlock"), dict) else {}
    seccomp_on = bool(worker.get("seccomp"))
    rlimits = dict(worker.get("rlimits") or {})
    if reaper.get("pids_cgroup") and "NPROC" not in rlimits:
        rlimits["PIDS"] = pids_max
    if network:
        net = "allowed (host network)"
    elif "net" in namespaces:
        net = "none (empty network namespace" + (", IP sockets refused by seccomp)" if seccomp_on else ")")
    elif seccomp_on:
        net = "IP sockets refused by seccomp"
    elif landlock.get("tcp"):
        net = "TCP refused by Landlock; UDP and DNS still open"
    else:
        net = "NOT blocked"
    return IsolationReport(
        platform=f"{sys.platform} {os.uname().release} ({os.uname().machine})",
        namespaces=namespaces,
        fresh_proc=bool(reaper.get("fresh_proc")),
        landlock_abi=int(landlock.get("abi") or 0),
        landlock_tcp=bool(landlock.get("tcp")),
        landlock_scoped=bool(landlock.get("scoped")),
        seccomp=seccomp_on,
        capabilities_dropped=bool(worker.get("caps_dropped")),
        network=net,
        network_allowed=network,
        rlimits=rlimits,
        disk_quota_mb=reaper.get("quota_mb"),
        process_cleanup=str(reaper.get("cleanup")),
        warnings=tuple(str(w) for w in (reaper.get("warnings") or []) + (worker.get("warnings") or [])),
    )
