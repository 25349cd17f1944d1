"""Length-prefixed messages over a pipe, read in bulk: the one transport of both sides.

Every command to a worker gets exactly one reply, in order (see
:mod:`vecpool._engine.numbering`, which numbers both on the parent's side).
"""

from __future__ import annotations

import os

__all__ = ["Channel"]

_JOIN_BELOW = 1 << 16
"""Messages up to this size are joined with their header and read in chunks; larger
ones are written and read in place (no copies of megabytes of infos)."""


class Channel:
    """Length-prefixed messages over a pipe's file descriptor, read in bulk.

    The framing is ``multiprocessing.Connection``'s (a 4-byte big-endian length,
    then the bytes), but each side reads whatever the pipe holds in one system call
    and keeps the rest: a step costs one ``write`` and one ``read`` per side instead
    of ``Connection``'s three calls and layers of Python. Because several messages
    can arrive in one read, callers check :meth:`has_message` before polling.
    """

    __slots__ = ("buffer", "fd")

    def __init__(self, fd: int) -> None:
        """Wrap the (blocking) descriptor ``fd``."""
        self.fd = fd
        self.buffer = b""

    def send(self, payload: bytes) -> None:
        """Write one message (all of it, however the pipe splits the write).

        A small message goes in one ``write`` with its header; a large one is
        written from the payload itself, not from a copy joined to the header.
        """
        header = len(payload).to_bytes(4, "big")
        if len(payload) <= _JOIN_BELOW:  # the hot path: one write, mostly whole
            data = header + payload
            written = os.write(self.fd, data)
            if written == len(data):
                return
            parts: tuple[bytes, ...] = (data[written:],)
        else:
            parts = (header, payload)
        for part in parts:
            view = memoryview(part)
            while view:
                view = view[os.write(self.fd, view) :]

    def has_message(self) -> bool:
        """Whether a whole message is already buffered (no system call)."""
        buffer = self.buffer
        return len(buffer) >= 4 and len(buffer) - 4 >= int.from_bytes(buffer[:4], "big")

    def recv(self) -> bytes | memoryview:
        """Read one message, blocking until it is complete.

        A large message is read in chunks sized to what is still missing and joined
        once, so reading it takes linear time.

        Raises:
            EOFError: If the other end closed the pipe.
        """
        buffer = self.buffer
        while len(buffer) < 4:
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                raise EOFError
            buffer += chunk
        end = 4 + int.from_bytes(buffer[:4], "big")
        if len(buffer) < end:
            if end <= _JOIN_BELOW:
                parts, have = [buffer], len(buffer)
                while have < end:
                    chunk = self._read(max(1 << 16, end - have))
                    parts.append(chunk)
                    have += len(chunk)
                buffer = b"".join(parts)
            else:  # large: read straight into one buffer of its size, no joins
                whole = bytearray(end)
                whole[: len(buffer)] = buffer
                view, have = memoryview(whole), len(buffer)
                while have < end:
                    count = os.readv(self.fd, [view[have:]])
                    if not count:
                        raise EOFError
                    have += count
                self.buffer = b""
                return view[4:]  # pickle and numpy read it in place
        self.buffer = buffer[end:]
        return buffer[4:end]

    def _read(self, size: int) -> bytes:
        chunk = os.read(self.fd, size)
        if not chunk:
            raise EOFError
        return chunk
