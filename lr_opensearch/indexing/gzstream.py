"""A gzip reader that hands over every byte it could decompress before it fails.

``gzip.GzipFile`` under a ``BufferedReader`` raises on a cut or corrupt file while it is
filling a buffer, and the lines decompressed into that buffer are lost with it. This
stream decompresses in small steps and delivers what it has first, so the corpus reader
gets every complete line before the error and can report where the file breaks.

zlib raises on corrupt data without handing over what it decompressed in the same call, so
when a step fails the stream goes back to the state before it and feeds the damaged read
one byte at a time: every byte before the damage comes out, and ``consumed`` says where
the damage starts in the file.

Also the file facts the reader and the progress bar use: ``is_gzip``, ``count_lines``,
``damage_at``.
"""

from __future__ import annotations

import io
import zlib
from typing import IO

from .config import STDIN

CHUNK = 1 << 16  # compressed bytes read at a time
OUT = 1 << 20  # most decompressed bytes produced per step (bounds memory)


class GzipStream(io.RawIOBase):
    """Raw stream of the decompressed content of ``raw`` (one or more gzip members).

    Raises (from ``readinto``, only once everything before is delivered):
        EOFError: the file ends inside a gzip member.
        zlib.error: the compressed data is corrupt (or its checksum does not match).
    """

    def __init__(self, raw: IO[bytes] | io.RawIOBase) -> None:
        super().__init__()
        self._raw = raw
        self._d = zlib.decompressobj(wbits=31)
        self._input: bytes | memoryview = b""
        self._out = b""
        self._read = 0  # compressed bytes read from ``raw``
        self._careful = False  # a step failed: feed one byte at a time up to the damage

    @property
    def consumed(self) -> int:
        """Compressed bytes of the file fed to the decompressor so far (after a failure:
        where the damage starts)."""
        return self._read - len(self._input)

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
            self._read += len(self._input)
            if not self._input:
                if self._d.eof:
                    return False
                raise EOFError("the file ends in the middle of the compressed data")
        if self._d.eof:  # the previous member is complete: another one, or zero padding
            if not bytes(self._input).strip(b"\x00"):
                self._input = b""
                return True
            self._d = zlib.decompressobj(wbits=31)
        # a view: one byte at a time must not copy the rest of the read each time
        view = memoryview(self._input)
        piece = view[:1] if self._careful else view
        rest = view[len(piece):]
        before = None if self._careful else self._d.copy()
        try:
            self._out = self._d.decompress(piece, OUT)
        except zlib.error as exc:
            if before is None:
                raise zlib.error(f"{exc}, at byte {self.consumed} of the file") from None
            self._d, self._careful = before, True
            return True
        left = self._d.unused_data if self._d.eof else self._d.unconsumed_tail
        self._input = left + rest if left else rest
        return True


MAGIC = b"\x1f\x8b"  # the first two bytes of every gzip member


class Prefixed(io.RawIOBase):
    """``head`` (bytes already read from ``rest``) then the rest of ``rest``: a stream that
    cannot seek back (stdin) read again from its start after its magic bytes were looked at."""

    def __init__(self, head: bytes, rest: IO[bytes]) -> None:
        super().__init__()
        self._head, self._rest = head, rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        if self._head:
            n = min(len(buffer), len(self._head))
            buffer[:n], self._head = self._head[:n], self._head[n:]
            return n
        data = self._rest.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def is_gzip(path: str) -> bool:
    """Whether the file at ``path`` is gzip (by its magic bytes; ``-``, stdin: not known
    before it is read: ``reader.open_corpus`` looks at its first bytes)."""
    if path == STDIN:
        return False
    with open(path, "rb") as f:
        return f.read(2) == MAGIC


def count_lines(path: str) -> int:
    """Number of lines of a plain (not gzip) file, counted in 1 MiB blocks."""
    n, last = 0, b"\n"
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            n += block.count(b"\n")
            last = block[-1:]
    return n + (last != b"\n")


def damage_at(stream: IO[bytes]) -> int | None:
    """Where a ``.gz`` corpus stopped decompressing (bytes of the file), else None."""
    gz = getattr(stream, "raw", None)
    return gz.consumed if isinstance(gz, GzipStream) else None
