"""A seccomp deny list, written as classic BPF by hand (no libseccomp dependency).

The filter blocks what a code interpreter never needs and what most kernel escapes
start from: ptrace and cross-process memory access, mounting, new namespaces,
bpf, perf, keyrings, io_uring, userfaultfd, module loading and the like. Everything
else is allowed: a deny list keeps arbitrary Python and its C extensions working,
and the other layers (namespaces, Landlock, rlimits) do the confining.
"""

from __future__ import annotations

import ctypes
import errno

from . import linux

_RET_ALLOW = 0x7FFF0000
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000

_LD_W_ABS = 0x20   # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15      # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x35      # BPF_JMP | BPF_JGE | BPF_K
_JSET_K = 0x45     # BPF_JMP | BPF_JSET | BPF_K
_RET_K = 0x06      # BPF_RET | BPF_K

_OFF_NR, _OFF_ARCH, _OFF_ARG0 = 0, 4, 16  # struct seccomp_data; ARG0 is the low word (little endian)

_DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr",
    "unshare", "setns", "bpf", "perf_event_open", "userfaultfd", "fanotify_init",
    "keyctl", "add_key", "request_key", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "reboot", "swapon", "swapoff", "acct", "quotactl", "syslog", "open_by_handle_at",
    "name_to_handle_at", "uselib", "iopl", "ioperm",
)

# Syscall numbers per architecture, for the names above plus clone, clone3 and socket.
_X86_64 = dict(
    ptrace=101, process_vm_readv=310, process_vm_writev=311, kcmp=312, pidfd_getfd=438,
    mount=165, umount2=166, pivot_root=155, chroot=161, open_tree=428, move_mount=429,
    fsopen=430, fsconfig=431, fsmount=432, fspick=433, mount_setattr=442,
    unshare=272, setns=308, bpf=321, perf_event_open=298, userfaultfd=323, fanotify_init=300,
    keyctl=250, add_key=248, request_key=249, io_uring_setup=425, io_uring_enter=426,
    io_uring_register=427, kexec_load=246, kexec_file_load=320, init_module=175,
    finit_module=313, delete_module=176, reboot=169, swapon=167, swapoff=168, acct=163,
    quotactl=179, syslog=103, open_by_handle_at=304, name_to_handle_at=303, uselib=134,
    iopl=172, ioperm=173, clone=56, clone3=435, socket=41,
)
_AARCH64 = dict(
    ptrace=117, process_vm_readv=270, process_vm_writev=271, kcmp=272, pidfd_getfd=438,
    mount=40, umount2=39, pivot_root=41, chroot=51, open_tree=428, move_mount=429,
    fsopen=430, fsconfig=431, fsmount=432, fspick=433, mount_setattr=442,
    unshare=97, setns=268, bpf=280, perf_event_open=241, userfaultfd=282, fanotify_init=262,
    keyctl=219, add_key=217, request_key=218, io_uring_setup=425, io_uring_enter=426,
    io_uring_register=427, kexec_load=104, kexec_file_load=294, init_module=105,
    finit_module=273, delete_module=106, reboot=142, swapon=224, swapoff=225, acct=89,
    quotactl=60, syslog=116, open_by_handle_at=265, name_to_handle_at=264,
    clone=220, clone3=435, socket=198,
)
_ARCHES = {"x86_64": (0xC000003E, _X86_64), "aarch64": (0xC00000B7, _AARCH64)}

_AF_INET, _AF_INET6, _AF_PACKET = 2, 10, 17


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def supported() -> bool:
    return linux.MACHINE in _ARCHES


def build(block_inet: bool) -> list[tuple[int, int, int, int]]:
    """The filter program as (code, jt, jf, k) tuples; exposed for tests and review."""
    audit_arch, table = _ARCHES[linux.MACHINE]
    eperm = _RET_ERRNO | errno.EPERM
    prog = [
        (_LD_W_ABS, 0, 0, _OFF_ARCH),
        (_JEQ_K, 1, 0, audit_arch),
        (_RET_K, 0, 0, _RET_KILL_PROCESS),   # foreign ABI: never let it in
        (_LD_W_ABS, 0, 0, _OFF_NR),
    ]
    if linux.MACHINE == "x86_64":
        prog += [(_JGE_K, 0, 1, 0x40000000), (_RET_K, 0, 0, eperm)]  # x32 syscalls
    for name in _DENIED:
        if name in table:
            prog += [(_JEQ_K, 0, 1, table[name]), (_RET_K, 0, 0, eperm)]
    # clone3 passes its flags in memory BPF cannot read; ENOSYS makes libc fall back to clone.
    prog += [(_JEQ_K, 0, 1, table["clone3"]), (_RET_K, 0, 0, _RET_ERRNO | errno.ENOSYS)]
    prog += [
        (_JEQ_K, 0, 4, table["clone"]),
        (_LD_W_ABS, 0, 0, _OFF_ARG0),
        (_JSET_K, 0, 1, linux.NAMESPACE_FLAGS),
        (_RET_K, 0, 0, eperm),
        (_RET_K, 0, 0, _RET_ALLOW),
    ]
    if block_inet:
        eacces = _RET_ERRNO | errno.EACCES
        prog += [
            (_JEQ_K, 0, 4, table["socket"]),
            (_LD_W_ABS, 0, 0, _OFF_ARG0),
            (_JEQ_K, 3, 0, _AF_INET),
            (_JEQ_K, 2, 0, _AF_INET6),
            (_JEQ_K, 1, 0, _AF_PACKET),
            (_RET_K, 0, 0, _RET_ALLOW),
            (_RET_K, 0, 0, eacces),
        ]
    prog.append((_RET_K, 0, 0, _RET_ALLOW))
    return prog


def install(block_inet: bool) -> int:
    """Load the filter into this thread (inherited by children); returns its length."""
    prog = build(block_inet)
    filters = (_SockFilter * len(prog))(*[_SockFilter(*ins) for ins in prog])
    fprog = _SockFprog(len(prog), filters)
    linux.prctl(linux.PR_SET_NO_NEW_PRIVS, 1)
    linux.check(linux.libc.prctl(ctypes.c_int(linux.PR_SET_SECCOMP), ctypes.c_ulong(2),
                                  ctypes.byref(fprog), ctypes.c_ulong(0), ctypes.c_ulong(0)))
    return len(prog)
