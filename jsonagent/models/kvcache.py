"""The system prompt's KV cache on disk: evaluated once per machine, loaded by every fresh process.

A file holds llama.cpp's per-sequence state (the keys and values of sequence 0 and its
tokens), not the whole context state, which would also copy a logits buffer of hundreds of MB.
The file name is a hash of everything that makes the state valid: the model file, the
llama.cpp version and the prompt tokens; the tokens stored in the file are compared again on
load. A file that cannot be read or does not match is ignored, deleted (the caller evaluates
the prompt and saves it again) and logged once. Once the folder passes its size cap the least
recently used files go first; a load counts as a use.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from jsonagent.home import home
from jsonagent.models import catalog

log = logging.getLogger("jsonagent.models")

SUFFIX = ".kv"
_warned: set[str] = set()


def kv_dir() -> Path:
    return home() / "kv"


def model_identity(path: Path) -> str:
    """Who the model file is, without hashing a GB: the catalog's pinned sha256, else size and mtime."""
    stat = path.stat()
    for entry in catalog.CATALOG.values():
        if path.name == entry.filename and stat.st_size == entry.size:
            return f"sha256:{entry.sha256}"
    return f"file:{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"


class PrefixCache:
    """Prompt-prefix states in one folder, keyed by model, engine version and tokens."""

    def __init__(self, folder: Path, identity: str, engine: str, max_bytes: int):
        self.folder = folder
        self.identity = identity
        self.engine = engine
        self.max_bytes = max_bytes

    def file(self, tokens: Sequence[int]) -> Path:
        digest = hashlib.sha256(f"{self.identity}\n{self.engine}\n".encode())
        digest.update(",".join(map(str, tokens)).encode())
        return self.folder / (digest.hexdigest()[:40] + SUFFIX)

    def load(self, tokens: Sequence[int], read: Callable[[Path], Sequence[int] | None]) -> bool:
        """Restore the state for `tokens` through `read` (which returns the file's tokens, or None)."""
        path = self.file(tokens)
        if not path.is_file():
            return False
        try:
            got = read(path)
        except Exception as exc:  # a reader failing on a bad file is the case we are here for
            got, why = None, str(exc)
        else:
            why = "unreadable" if got is None else "its tokens do not match"
        if got is None or list(got) != list(tokens):
            warn_once(f"ignoring the prompt cache {path} ({why}); it will be rebuilt")
            path.unlink(missing_ok=True)
            return False
        os.utime(path)  # most recently used
        return True

    def save(self, tokens: Sequence[int], write: Callable[[Path], bool]) -> None:
        """Write the state for `tokens` through `write(path)`, atomically, then trim the folder."""
        path = self.file(tokens)
        self.folder.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
        try:
            if not write(partial):
                warn_once(f"could not save the prompt cache to {path}")
                return
            os.replace(partial, path)
        except OSError as exc:  # a full or read-only disk costs speed, never the run
            warn_once(f"could not save the prompt cache to {path}: {exc}")
            return
        finally:
            partial.unlink(missing_ok=True)
        self.evict(keep=path)

    def evict(self, keep: Path | None = None) -> None:
        """Delete least recently used files until the folder fits in `max_bytes`."""
        files = []
        for path in self.folder.glob("*" + SUFFIX):
            try:
                stat = path.stat()
            except FileNotFoundError:  # another process evicted it first
                continue
            files.append((stat.st_mtime_ns, stat.st_size, path))
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files):
            if total <= self.max_bytes:
                break
            if path != keep:
                path.unlink(missing_ok=True)
                total -= size


def warn_once(message: str) -> None:
    """Log a warning the first time this process meets it."""
    if message not in _warned:
        _warned.add(message)
        log.warning(message)


# llama.cpp's per-sequence state files, for PrefixCache's read and write callbacks.

def seq_writer(ctx, tokens: Sequence[int], seq_id: int = 0) -> Callable[[Path], bool]:
    import llama_cpp

    def write(path: Path) -> bool:
        array = (llama_cpp.llama_token * len(tokens))(*tokens)
        return llama_cpp.llama_state_seq_save_file(ctx, str(path).encode(), seq_id, array, len(tokens)) > 0

    return write


def seq_reader(ctx, capacity: int, seq_id: int = 0) -> Callable[[Path], list[int] | None]:
    import llama_cpp

    def read(path: Path) -> list[int] | None:
        array = (llama_cpp.llama_token * capacity)()
        count = ctypes.c_size_t(0)
        if llama_cpp.llama_state_seq_load_file(ctx, str(path).encode(), seq_id, array,
                                               capacity, ctypes.byref(count)) == 0:
            return None
        return list(array[: count.value])

    return read
