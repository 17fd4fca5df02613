"""Landlock: the kernel's unprivileged file-system, TCP and scope allowlist.

`restrict()` is called once in the worker before any user code runs. Whatever the
kernel's ABI supports is handled (so denied unless a rule grants it); rights the
ABI predates cannot be restricted and are reported as such.
"""

from __future__ import annotations

import ctypes
import os

from . import linux

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446  # same number on every arch
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1

_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # rights a non-directory can hold
READ_ONLY = EXECUTE | READ_FILE | READ_DIR


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def abi_version() -> int:
    """0 when Landlock is absent or disabled, else the kernel's ABI number."""
    try:
        return linux.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0),
                             ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0


def _fs_rights(abi: int) -> int:
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


def restrict(read_only: list[str], read_write: list[str], block_tcp: bool) -> dict:
    """Confine this thread and its future children; returns what was enforced.

    Paths that do not exist are skipped. Raises OSError if the kernel refuses.
    """
    abi = abi_version()
    if abi < 1:
        raise OSError(38, "Landlock is not available")
    handled_fs = _fs_rights(abi)
    attr = _RulesetAttr(handled_fs, 0, 0)
    size = 8
    tcp = abi >= 4 and block_tcp
    if tcp:
        attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP  # no net rules: all TCP denied
        size = 16
    scoped = abi >= 6
    if scoped:
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        size = 24
    if abi >= 4:
        size = max(size, 16)
    ruleset = linux.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    try:
        for paths, access in ((read_only, READ_ONLY), (read_write, handled_fs)):
            for path in paths:
                _allow(ruleset, path, access & handled_fs)
        linux.prctl(linux.PR_SET_NO_NEW_PRIVS, 1)
        linux.syscall(_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0))
    finally:
        os.close(ruleset)
    return {"abi": abi, "tcp": tcp, "scoped": scoped}


def _allow(ruleset: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if not os.path.isdir(path):
            access &= _FILE_RIGHTS
        rule = _PathBeneathAttr(access, fd)
        linux.syscall(_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                      ctypes.byref(rule), ctypes.c_uint32(0))
    finally:
        os.close(fd)
