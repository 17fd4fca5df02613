"""What one call keeps of the worker's stdout or stderr: the first bytes up to a cap, and a count of all."""

from __future__ import annotations


class Capture:
    """One output stream of one call: the first `limit` bytes, and a count of all of them."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.limit - len(self.data)
        if room > 0:
            self.data += chunk[:room]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.data)

    def text(self) -> str:
        data = bytes(self.data)
        if self.truncated:
            data = _trim_partial_utf8(data)
        return data.decode("utf-8", "replace")


def _trim_partial_utf8(data: bytes) -> bytes:
    """Drop a multi-byte character cut in half by the cap, instead of showing U+FFFD for it."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # found the lead byte (or ASCII)
            need = 1 if byte < 0x80 else 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4
            return data[:-back] if need > back else data
    return data
