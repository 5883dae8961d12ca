"""A gzip reader that hands over every byte it could decompress before it fails.

``gzip.GzipFile`` under a ``BufferedReader`` raises on a cut or corrupt file while it is
filling a buffer, and the lines decompressed into that buffer are lost with it. This
stream decompresses in small steps and delivers what it has first, so the corpus reader
gets every complete line before the error and can report where the file breaks.
"""

from __future__ import annotations

import io
import zlib
from typing import IO

CHUNK = 1 << 16  # compressed bytes read at a time
OUT = 1 << 20  # most decompressed bytes produced per step (bounds memory)


class GzipStream(io.RawIOBase):
    """Raw stream of the decompressed content of ``raw`` (one or more gzip members).

    Raises (from ``readinto``, only once everything before is delivered):
        EOFError: the file ends inside a gzip member.
        zlib.error: the compressed data is corrupt (or its checksum does not match).
    """

    def __init__(self, raw: IO[bytes]) -> None:
        super().__init__()
        self._raw = raw
        self._d = zlib.decompressobj(wbits=31)
        self._input = b""
        self._out = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._out:
            if not self._step():
                return 0
        n = min(len(buffer), len(self._out))
        buffer[:n] = self._out[:n]
        self._out = self._out[n:]
        return n

    def _step(self) -> bool:
        """Decompress some more into ``_out``; False at the clean end of the file."""
        if not self._input:
            self._input = self._raw.read(CHUNK)
            if not self._input:
                if self._d.eof:
                    return False
                raise EOFError("the file ends in the middle of the compressed data")
        if self._d.eof:  # the previous member is complete: another one, or zero padding
            if not self._input.strip(b"\x00"):
                self._input = b""
                return True
            self._d = zlib.decompressobj(wbits=31)
        self._out = self._d.decompress(self._input, OUT)
        self._input = self._d.unused_data if self._d.eof else self._d.unconsumed_tail
        return True
