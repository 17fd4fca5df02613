"""Frames on the private control pipes: a 4-byte big-endian length, then UTF-8 JSON.

The supervisor reads frames written by the worker, and the worker runs untrusted
code that can write anything to those pipes. So decoding is strict and bounded:
anything that is not exactly one well-formed frame of the expected shape raises
`ProtocolViolation`, which the supervisor turns into a crash result.
"""

from __future__ import annotations

import json
import os
import struct

_HEADER = struct.Struct(">I")


class ProtocolViolation(Exception):
    """The peer sent bytes that are not a valid frame (never shown as a supervisor failure)."""


def encode(message: dict) -> bytes:
    payload = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "replace")
    return _HEADER.pack(len(payload)) + payload


class FrameReader:
    """Accumulates bytes from a non-blocking fd and yields complete, size-checked frames."""

    def __init__(self, max_frame: int) -> None:
        self.max_frame = max_frame
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[dict]:
        self._buf += data
        frames = []
        while len(self._buf) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(self._buf)
            if size > self.max_frame:
                raise ProtocolViolation(f"frame of {size} bytes exceeds the {self.max_frame} byte limit")
            if len(self._buf) < _HEADER.size + size:
                break
            payload = bytes(self._buf[_HEADER.size:_HEADER.size + size])
            del self._buf[:_HEADER.size + size]
            try:
                message = json.loads(payload.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError) as exc:
                raise ProtocolViolation(f"frame is not valid JSON: {exc.__class__.__name__}") from None
            if not isinstance(message, dict):
                raise ProtocolViolation("frame is not a JSON object")
            frames.append(message)
        return frames

    @property
    def pending(self) -> int:
        return len(self._buf)


def read_frame_blocking(fd: int, max_frame: int = 1 << 26) -> dict | None:
    """Read one frame from a blocking fd; None on EOF. Used by the child side only."""
    header = _read_exact(fd, _HEADER.size)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > max_frame:
        raise ProtocolViolation("oversized frame")
    payload = _read_exact(fd, size)
    if payload is None:
        return None
    return json.loads(payload.decode("utf-8"))


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_exact(fd: int, size: int) -> bytes | None:
    chunks, remaining = [], size
    while remaining:
        chunk = os.read(fd, remaining)
        if not chunk:
            return None
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def expect(message: dict, fields: dict[str, type | tuple[type, ...]]) -> dict:
    """Check that `message` carries each field with the right type; bool is never an int."""
    for name, kind in fields.items():
        value = message.get(name)
        if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
            raise ProtocolViolation(f"field {name!r} is missing or has the wrong type")
    return message


def _as_tuple(kind) -> tuple:
    return kind if isinstance(kind, tuple) else (kind,)
