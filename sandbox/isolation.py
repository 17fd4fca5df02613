"""Building the cage, in the child processes: namespaces, mounts, and the worker's confinement.

Order matters and is the same everywhere:

    boot (host pid ns)   unshare user+pid+mount+ipc+uts(+net), write uid/gid maps, fork
    reaper (pid 1)       private mounts: fresh /proc, tmpfs workdir of fixed size, tmpfs /dev/shm
    worker (pid 2)       rlimits -> Landlock -> drop capabilities -> seccomp -> user code

Each step that fails is recorded as a warning and skipped, never fatal: the
supervisor decides from the report whether that level of isolation is acceptable.
"""

from __future__ import annotations

import os
import sys

from . import linux

# Read-only for the code: the system's libraries and tools, and the interpreter's own tree.
SYSTEM_READ_ONLY = [
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
    "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/timezone",
    "/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/hosts", "/etc/host.conf",
    "/etc/resolv.conf", "/etc/gai.conf", "/etc/services", "/etc/protocols", "/etc/mime.types",
    "/etc/ssl", "/etc/ca-certificates", "/etc/pki", "/etc/os-release", "/etc/alternatives",
    "/etc/fonts", "/etc/matplotlibrc", "/proc", "/sys/devices/system/cpu",
    "/dev/urandom", "/dev/random",
]
DEVICES_READ_WRITE = ["/dev/null", "/dev/zero", "/dev/full"]

_ALL_NAMESPACES = {
    "user": linux.CLONE_NEWUSER, "pid": linux.CLONE_NEWPID, "mount": linux.CLONE_NEWNS,
    "ipc": linux.CLONE_NEWIPC, "uts": linux.CLONE_NEWUTS, "net": linux.CLONE_NEWNET,
}


def enter_namespaces(network: bool, warnings: list[str]) -> list[str]:
    """Unshare every namespace we can; returns their names (empty when none worked)."""
    wanted = [n for n in _ALL_NAMESPACES if not (network and n == "net")]
    attempts = [wanted]
    if os.geteuid() == 0:
        attempts.append([n for n in wanted if n != "user"])  # root may lack userns but not the rest
    uid, gid = os.getuid(), os.getgid()
    for names in attempts:
        flags = 0
        for name in names:
            flags |= _ALL_NAMESPACES[name]
        try:
            linux.unshare(flags)
        except OSError as exc:
            warnings.append(f"unshare({'+'.join(names)}) failed: {exc.strerror}")
            continue
        if "user" in names:
            try:
                _write("/proc/self/setgroups", "deny")
                _write("/proc/self/uid_map", f"0 {uid} 1")
                _write("/proc/self/gid_map", f"0 {gid} 1")
            except OSError as exc:
                warnings.append(f"writing uid/gid maps failed: {exc.strerror}")
        return names
    return []


def mount_private(workdir: str, disk_mb: int, max_files: int, pid_ns: bool,
                  warnings: list[str]) -> dict:
    """In the new mount namespace: fresh /proc, a size-capped tmpfs over the workdir.

    Returns {"host_fd": fd of the real workdir (kept by the reaper to mirror files),
    "quota_mb", "fresh_proc", "shm"}.
    """
    done = {"host_fd": None, "quota_mb": None, "fresh_proc": False, "shm": False}
    try:
        linux.mount("none", "/", None, linux.MS_REC | linux.MS_PRIVATE)
    except OSError as exc:
        warnings.append(f"making mounts private failed: {exc.strerror}")
        return done
    if pid_ns:
        try:
            linux.mount("proc", "/proc", "proc", linux.MS_NOSUID | linux.MS_NODEV | linux.MS_NOEXEC)
            done["fresh_proc"] = True
        except OSError as exc:
            warnings.append(f"mounting a fresh /proc failed: {exc.strerror}")
    host_fd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        linux.mount("tmpfs", workdir, "tmpfs", linux.MS_NOSUID | linux.MS_NODEV,
                    f"size={disk_mb}m,nr_inodes={max_files},mode=0700")
        done["host_fd"], done["quota_mb"] = host_fd, disk_mb
    except OSError as exc:
        os.close(host_fd)
        warnings.append(f"tmpfs workdir failed: {exc.strerror}; disk use is not capped")
    try:
        linux.mount("tmpfs", "/dev/shm", "tmpfs", linux.MS_NOSUID | linux.MS_NODEV,
                    "size=64m,nr_inodes=1024,mode=1777")
        done["shm"] = True
    except OSError:
        pass  # multiprocessing locks will fail; nothing else depends on it
    return done


def interpreter_paths() -> list[str]:
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             os.path.dirname(os.path.realpath(sys.executable))}
    return sorted(p for p in paths if p and os.path.realpath(p) != "/")


def confine(workdir: str, memory_mb: int, limits, network: bool, disable: set[str],
            shm: bool, user_ns: bool, host_uid: int, warnings: list[str]) -> dict:
    """Worker side, before any user code: rlimits, Landlock, capabilities, seccomp."""
    from . import landlock, seccomp
    from .limits import apply

    done: dict = {"rlimits": {}, "landlock": None, "seccomp": False, "caps_dropped": False}
    if "rlimits" not in disable:
        extra = 0 if user_ns else _processes_of(os.getuid())
        done["rlimits"] = apply(limits, memory_mb, extra)
        if host_uid == 0:
            done["rlimits"].pop("NPROC", None)  # the kernel never applies it to the real root user
    if "landlock" not in disable:
        read_write = [workdir] + DEVICES_READ_WRITE + (["/dev/shm"] if shm else [])
        try:
            done["landlock"] = landlock.restrict(SYSTEM_READ_ONLY + interpreter_paths(), read_write,
                                                 block_tcp=not network)
        except OSError as exc:
            warnings.append(f"Landlock unavailable: {exc.strerror}")
    if "capabilities" not in disable:
        try:
            linux.drop_all_capabilities()
            done["caps_dropped"] = linux.effective_capabilities() == 0
        except OSError as exc:
            warnings.append(f"dropping capabilities failed: {exc.strerror}")
    if "seccomp" not in disable:
        if seccomp.supported():
            try:
                seccomp.install(block_inet=not network)
                done["seccomp"] = True
            except OSError as exc:
                warnings.append(f"seccomp unavailable: {exc.strerror}")
        else:
            warnings.append(f"seccomp filter has no syscall table for {linux.MACHINE}")
    return done


def _processes_of(uid: int) -> int:
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    count += 1
            except OSError:
                pass
    return count


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
