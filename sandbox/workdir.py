"""The workdir: find what a call changed, and mirror it between the sandbox and the host.

Inside the mount namespace the workdir is a size-capped tmpfs that only the sandbox
sees. The reaper (never user code) mirrors it to the host directory after every call,
through directory fds opened with O_NOFOLLOW, so a symlink planted by the code can
never steer a write or a read outside either tree. Only regular files and
directories are mirrored; symlinks, fifos and sockets stay inside.
"""

from __future__ import annotations

import errno
import os
import stat

SCRATCH = ".tmp"  # TMPDIR inside the workdir: counted by the quota, never reported or mirrored

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

Snapshot = dict  # relative path -> ("d",) or ("f", size, mtime_ns, inode)


def snapshot(root_fd: int, limit: int = 100_000) -> Snapshot:
    """Walk the tree under `root_fd` without following symlinks; stops after `limit` entries."""
    found: Snapshot = {}
    stack = [("", os.dup(root_fd))]
    try:
        while stack:
            prefix, fd = stack.pop()
            try:
                with os.scandir(fd) as entries:
                    for entry in entries:
                        if len(found) >= limit:
                            return found
                        rel = prefix + entry.name
                        if not prefix and entry.name == SCRATCH:
                            continue
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        if stat.S_ISDIR(st.st_mode):
                            found[rel] = ("d",)
                            try:
                                stack.append((rel + "/", os.open(entry.name, _DIR_FLAGS, dir_fd=fd)))
                            except OSError:
                                pass
                        elif stat.S_ISREG(st.st_mode):
                            found[rel] = ("f", st.st_size, st.st_mtime_ns, st.st_ino)
            finally:
                os.close(fd)
    finally:
        for _, fd in stack:
            os.close(fd)
    return found


def changes(before: Snapshot, after: Snapshot) -> tuple[list[str], list[str]]:
    """(created or modified paths, removed paths); directories count only when new or gone."""
    changed = sorted(p for p, v in after.items() if before.get(p) != v)
    removed = sorted((p for p in before if p not in after), key=lambda p: -p.count("/"))
    return changed, removed


def mirror(src_fd: int, dst_fd: int, changed: list[str], removed: list[str], kinds: Snapshot) -> list[str]:
    """Copy `changed` entries from src to dst and delete `removed` from dst; returns problems."""
    problems = []
    for rel in changed:
        try:
            if kinds.get(rel, ("f",))[0] == "d":
                os.close(_open_dirs(dst_fd, rel.split("/"), create=True))
            else:
                _copy_file(src_fd, dst_fd, rel)
        except OSError as exc:
            problems.append(f"{rel}: {exc.strerror or exc}")
    for rel in removed:
        try:
            parent = _open_dirs(dst_fd, rel.split("/")[:-1], create=False)
        except OSError:
            continue
        try:
            _remove(parent, rel.rsplit("/", 1)[-1])
        except OSError as exc:
            problems.append(f"{rel}: {exc.strerror or exc}")
        finally:
            os.close(parent)
    return problems


def _open_dirs(root_fd: int, parts: list[str], create: bool) -> int:
    fd = os.dup(root_fd)
    for part in parts:
        if part in ("", ".", ".."):
            os.close(fd)
            raise OSError(errno.EINVAL, "bad path component")
        try:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            if not create or exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                os.close(fd)
                raise
            try:
                if exc.errno != errno.ENOENT:
                    _remove(fd, part)  # a file or symlink where the directory should be
                os.mkdir(part, 0o755, dir_fd=fd)
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                os.close(fd)
                raise
        os.close(fd)
        fd = nxt
    return fd


def _copy_file(src_root: int, dst_root: int, rel: str) -> None:
    *dirs, name = rel.split("/")
    src_dir = _open_dirs(src_root, dirs, create=False)
    try:
        src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=src_dir)
    finally:
        os.close(src_dir)
    try:
        st = os.fstat(src)
        if not stat.S_ISREG(st.st_mode):
            return
        dst_dir = _open_dirs(dst_root, dirs, create=True)
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
            try:
                dst = os.open(name, flags, st.st_mode & 0o777, dir_fd=dst_dir)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.ETXTBSY):
                    raise
                _remove(dst_dir, name)
                dst = os.open(name, flags, st.st_mode & 0o777, dir_fd=dst_dir)
        finally:
            os.close(dst_dir)
        try:
            remaining = st.st_size
            while remaining > 0:
                sent = os.sendfile(dst, src, None, min(remaining, 1 << 24))
                if sent == 0:
                    break
                remaining -= sent
            os.fchmod(dst, st.st_mode & 0o777)
            os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            os.close(dst)
    finally:
        os.close(src)


def _remove(dir_fd: int, name: str) -> None:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        return
    sub = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    try:
        for entry in os.listdir(sub):
            _remove(sub, entry)
    finally:
        os.close(sub)
    os.rmdir(name, dir_fd=dir_fd)
