"""Thin ctypes bindings for the Linux calls Python 3.11's `os` module lacks.

Only the child side of the sandbox imports this module. Every function raises
OSError with the real errno on failure, so callers can decide whether a missing
mechanism means "degrade" or "stop".
"""

from __future__ import annotations

import ctypes
import os
import platform

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

# unshare(2) / clone(2) flags.
CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
NAMESPACE_FLAGS = (CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC
                   | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET)

# mount(2) flags.
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REC = 0x4000
MS_PRIVATE = 0x40000

# prctl(2) options.
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4

MACHINE = platform.machine()


def check(ret: int) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return ret


def syscall(number: int, *args) -> int:
    return check(libc.syscall(ctypes.c_long(number), *args))


def unshare(flags: int) -> None:
    check(libc.unshare(ctypes.c_int(flags)))


def mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    check(libc.mount(source.encode(), target.encode(),
                      fstype.encode() if fstype else None,
                      ctypes.c_ulong(flags), data.encode() if data else None))


def sethostname(name: str) -> None:
    raw = name.encode()
    check(libc.sethostname(raw, ctypes.c_size_t(len(raw))))


def prctl(option: int, arg2: int = 0, arg3: int = 0, arg4: int = 0, arg5: int = 0) -> int:
    return check(libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg2), ctypes.c_ulong(arg3),
                             ctypes.c_ulong(arg4), ctypes.c_ulong(arg5)))


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def drop_all_capabilities() -> None:
    """Empty every capability set, lock root's special rules off, and empty the bounding set.

    Inside a fresh user namespace we are uid 0 with a full set; without this, `execve`
    of any binary would hand the full set straight back.
    """
    # SECBIT_NOROOT | _LOCKED | NO_SETUID_FIXUP | _LOCKED | KEEP_CAPS_LOCKED | NO_CAP_AMBIENT_RAISE | _LOCKED
    try:
        prctl(PR_SET_SECUREBITS, 0xEF)
    except OSError:
        pass  # needs CAP_SETPCAP; an unprivileged fallback holds no caps to lose anyway
    for cap in range(64):
        try:
            prctl(PR_CAPBSET_DROP, cap)
        except OSError:
            break  # EINVAL past the last cap, EPERM when we never had any
    try:
        prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    except OSError:
        pass
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    check(libc.capset(ctypes.byref(header), ctypes.byref(data)))


def effective_capabilities() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return -1
