"""Channel: length-prefixed framing over a pipe, read in bulk (no processes)."""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from vecpool._wire import channel as channel_module
from vecpool._wire.channel import Channel

JOIN_BELOW = 1 << 16


class Pipe:
    def __init__(self) -> None:
        self.r, self.w = os.pipe()
        self.open = {self.r, self.w}

    def close_writer(self) -> None:
        os.close(self.w)
        self.open.discard(self.w)

    def close(self) -> None:
        for fd in sorted(self.open):  # the reader first: a blocked writer wakes
            os.close(fd)
        self.open.clear()


@pytest.fixture
def pipe() -> Iterator[Pipe]:
    pipe = Pipe()
    yield pipe
    pipe.close()


@pytest.fixture
def reader(pipe: Pipe) -> Channel:
    return Channel(pipe.r)


@pytest.fixture
def writer(pipe: Pipe) -> Channel:
    return Channel(pipe.w)


def framed(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


def payload_of(size: int) -> bytes:
    return random.Random(size).randbytes(size)


class InThread:
    """Run ``target`` in a thread; re-raise its error on :meth:`join`."""

    def __init__(self, target: Callable[[], Any]) -> None:
        self.result: list[Any] = []
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, args=(target,), daemon=True)
        self.thread.start()

    def _run(self, target: Callable[[], Any]) -> None:
        try:
            self.result.append(target())
        except BaseException as error:  # noqa: BLE001 - handed to join()
            self.errors.append(error)

    def join(self) -> Any:
        self.thread.join(timeout=30)
        assert not self.thread.is_alive()
        if self.errors:
            raise self.errors[0]
        return self.result[0]


def send_all(writer: Channel, *payloads: bytes) -> InThread:
    def run() -> None:
        for payload in payloads:
            writer.send(payload)

    return InThread(run)


def forbid_system_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_system_call(*args: object) -> None:
        message = "a system call, yet the message was buffered"
        raise AssertionError(message)

    monkeypatch.setattr(os, "read", no_system_call)
    monkeypatch.setattr(os, "readv", no_system_call)


# -- round trips -----------------------------------------------------------------


def test_the_boundary_the_sizes_below_test_is_64_kib():
    assert channel_module._JOIN_BELOW == JOIN_BELOW


def test_an_empty_message_round_trips(reader, writer):
    writer.send(b"")
    got = reader.recv()
    assert got == b""
    assert len(got) == 0
    assert reader.buffer == b""


def test_a_small_message_round_trips_as_bytes(reader, writer):
    writer.send(b"hello")
    got = reader.recv()
    assert type(got) is bytes
    assert got == b"hello"
    assert reader.buffer == b""


def test_send_frames_with_a_big_endian_length(pipe, writer):
    writer.send(b"abc")
    assert os.read(pipe.r, 100) == b"\x00\x00\x00\x03abc"


@pytest.mark.parametrize(
    "size",
    [
        1,
        JOIN_BELOW - 5,
        JOIN_BELOW - 4,  # the largest whose frame fits one 64 KiB read
        JOIN_BELOW - 3,
        JOIN_BELOW - 1,
        JOIN_BELOW,
        JOIN_BELOW + 1,
        3 * 2**20 + 17,
        16 * 2**20,
    ],
)
def test_messages_of_every_size_round_trip(reader, writer, size):
    payload = payload_of(size)
    sending = send_all(writer, payload, b"after")
    got = reader.recv()
    assert isinstance(got, (bytes, memoryview))
    assert len(got) == size
    assert bytes(got) == payload
    assert reader.recv() == b"after"  # the large read took no byte of the next
    sending.join()
    assert reader.buffer == b""
    assert reader.has_message() is False


@pytest.mark.parametrize("size", [2**20, 5 * 2**20 + 3])
def test_a_large_message_is_read_in_place_into_a_memoryview(reader, writer, size):
    payload = payload_of(size)
    sending = send_all(writer, payload)
    got = reader.recv()
    sending.join()
    assert isinstance(got, memoryview)
    assert got.nbytes == size
    assert got.contiguous
    assert got.tobytes() == payload
    assert reader.buffer == b""


@pytest.mark.parametrize(
    ("size", "first_write"),
    [
        (0, 4),
        (100, 104),
        (JOIN_BELOW, JOIN_BELOW + 4),  # joined with its header
        (JOIN_BELOW + 1, 4),  # the header alone, then the payload itself
        (2**20, 4),
    ],
)
def test_send_joins_only_messages_up_to_the_boundary(
    reader, writer, monkeypatch, size, first_write
):
    asked: list[int] = []
    written: list[int] = []
    real_write = os.write

    def spy(fd: int, data: Any) -> int:
        asked.append(len(data))
        count = real_write(fd, data)
        written.append(count)
        return count

    monkeypatch.setattr(os, "write", spy)
    payload = payload_of(size)
    sending = send_all(writer, payload)
    got = reader.recv()
    sending.join()
    assert bytes(got) == payload
    assert asked[0] == first_write
    assert sum(written) == size + 4


def test_many_sizes_back_to_back_in_one_stream(reader, writer):
    sizes = [0, 1, 3, 4, 5, 1000, JOIN_BELOW - 4, JOIN_BELOW, 0, JOIN_BELOW + 1, 7]
    sizes += [200_000, 2, JOIN_BELOW - 3, 0]
    payloads = [payload_of(size) for size in sizes]
    sending = send_all(writer, *payloads)
    for payload in payloads:
        assert bytes(reader.recv()) == payload
    sending.join()
    assert reader.buffer == b""


# -- buffering -------------------------------------------------------------------


def test_back_to_back_messages_are_read_from_the_buffer(reader, writer, monkeypatch):
    payloads = [b"one", b"", b"three" * 100, bytes(range(256)), b"\x00\x00\x00\x04"]
    for payload in payloads:
        writer.send(payload)
    assert reader.has_message() is False  # nothing read yet: it makes no call
    assert reader.recv() == payloads[0]
    forbid_system_calls(monkeypatch)  # the rest came with the first read
    for payload in payloads[1:]:
        assert reader.has_message() is True
        assert reader.recv() == payload
    assert reader.has_message() is False
    assert reader.buffer == b""


def test_has_message_is_false_while_the_next_one_is_partial(pipe, reader, writer):
    second = b"the second message"
    writer.send(b"first")
    os.write(pipe.w, framed(second)[:10])
    assert reader.recv() == b"first"
    assert reader.buffer == framed(second)[:10]
    assert reader.has_message() is False
    os.write(pipe.w, framed(second)[10:])
    assert reader.has_message() is False  # buffered only: the pipe is not polled
    assert reader.recv() == second
    assert reader.has_message() is False
    assert reader.buffer == b""


@pytest.mark.parametrize(
    ("buffer", "whole"),
    [
        (b"", False),
        (b"\x00", False),
        (b"\x00\x00\x00", False),
        (b"\x00\x00\x00\x00", True),  # an empty message
        (b"\x00\x00\x00\x05abcd", False),
        (b"\x00\x00\x00\x05abcde", True),
        (b"\x00\x00\x00\x05abcdef", True),
        (b"\x00\x00\x01\x00" + bytes(255), False),
        (b"\x00\x00\x01\x00" + bytes(256), True),
        (b"\x01\x00\x00\x00" + bytes(1000), False),
    ],
)
def test_has_message_reads_only_the_buffer(reader, monkeypatch, buffer, whole):
    forbid_system_calls(monkeypatch)
    reader.buffer = buffer
    assert reader.has_message() is whole


def test_recv_takes_buffered_messages_without_system_calls(reader, monkeypatch):
    forbid_system_calls(monkeypatch)
    reader.buffer = framed(b"a") + framed(b"") + framed(b"bc") + b"\x00\x00"
    assert reader.recv() == b"a"
    assert reader.recv() == b""
    assert reader.recv() == b"bc"
    assert reader.buffer == b"\x00\x00"
    assert reader.has_message() is False


# -- splits ----------------------------------------------------------------------


@pytest.mark.parametrize("split", [1, 2, 3])
def test_a_header_split_across_writes(pipe, reader, monkeypatch, split):
    payload = b"after a split header"
    header = len(payload).to_bytes(4, "big")
    reads: list[int] = []
    read_once = threading.Event()
    real_read = os.read

    def spy(fd: int, size: int) -> bytes:
        chunk = real_read(fd, size)
        reads.append(len(chunk))
        read_once.set()
        return chunk

    monkeypatch.setattr(os, "read", spy)
    os.write(pipe.w, header[:split])
    receiving = InThread(reader.recv)
    assert read_once.wait(timeout=30)
    assert reads == [split]  # it holds part of a header and waits for the rest
    os.write(pipe.w, header[split:] + payload)
    assert receiving.join() == payload
    assert reads == [split, 4 - split + len(payload)]
    assert reader.buffer == b""


def test_a_header_written_in_two_pieces_before_the_read(pipe, reader):
    payload = b"xyz" * 10
    frame = framed(payload)
    os.write(pipe.w, frame[:2])
    os.write(pipe.w, frame[2:])
    assert reader.recv() == payload


@pytest.mark.parametrize("size", [10, JOIN_BELOW - 4, JOIN_BELOW + 100, 300_000])
def test_a_body_split_across_writes(pipe, reader, monkeypatch, size):
    payload = payload_of(size)
    frame = framed(payload)
    cut = min(len(frame) // 2, 40_000)  # the first piece fits the pipe
    read_once = threading.Event()
    real_read = os.read

    def spy(fd: int, count: int) -> bytes:
        chunk = real_read(fd, count)
        read_once.set()
        return chunk

    monkeypatch.setattr(os, "read", spy)
    os.write(pipe.w, frame[:cut])
    receiving = InThread(reader.recv)
    assert read_once.wait(timeout=30)
    rest = InThread(lambda: os.write(pipe.w, frame[cut:]))
    got = receiving.join()
    assert rest.join() == len(frame) - cut
    assert bytes(got) == payload


@pytest.mark.parametrize("most", [1, 2, 3, 5, 7, 4096])
def test_reads_cut_at_every_point_still_frame(reader, writer, monkeypatch, most):
    payloads = [b"", b"a", b"hello world", bytes(300), b"\x00\x00\x00\x01", b"z"]
    payloads += [payload_of(JOIN_BELOW + 9)]
    real_read, real_readv = os.read, os.readv

    def short_read(fd: int, size: int) -> bytes:
        return real_read(fd, min(size, most))

    def short_readv(fd: int, buffers: list[memoryview]) -> int:
        return real_readv(fd, [buffers[0][:most]])

    monkeypatch.setattr(os, "read", short_read)
    monkeypatch.setattr(os, "readv", short_readv)
    sending = send_all(writer, *payloads)
    for payload in payloads:
        assert bytes(reader.recv()) == payload
    sending.join()
    assert reader.buffer == b""


@pytest.mark.parametrize("most", [1, 3, 1000])
def test_send_finishes_writes_the_pipe_cuts_short(reader, writer, monkeypatch, most):
    payloads = [b"", b"short", bytes(5000), payload_of(JOIN_BELOW + 3)]
    calls: list[int] = []
    real_write = os.write

    def short_write(fd: int, data: Any) -> int:
        calls.append(len(data))
        return real_write(fd, data[:most])

    monkeypatch.setattr(os, "write", short_write)
    sending = send_all(writer, *payloads)
    for payload in payloads:
        assert bytes(reader.recv()) == payload
    sending.join()
    parts = [4 + len(p) if len(p) <= JOIN_BELOW else 4 for p in payloads]
    parts += [len(p) for p in payloads if len(p) > JOIN_BELOW]
    assert len(calls) == sum(-(-part // most) for part in parts)  # each cut resumed


# -- end of file -----------------------------------------------------------------


def test_eof_before_any_byte_raises(pipe, reader):
    pipe.close_writer()
    with pytest.raises(EOFError):
        reader.recv()


@pytest.mark.parametrize("have", [1, 2, 3])
def test_eof_mid_header_raises(pipe, reader, have):
    os.write(pipe.w, b"\x00\x00\x00\x10"[:have])
    pipe.close_writer()
    with pytest.raises(EOFError):
        reader.recv()


def test_eof_mid_body_of_a_small_message_raises(pipe, reader):
    os.write(pipe.w, (1000).to_bytes(4, "big") + bytes(10))
    pipe.close_writer()
    with pytest.raises(EOFError):
        reader.recv()


def test_eof_mid_body_of_a_large_message_raises(pipe, reader):
    os.write(pipe.w, (100_000).to_bytes(4, "big") + bytes(60_000))
    pipe.close_writer()
    with pytest.raises(EOFError):
        reader.recv()


def test_eof_after_whole_messages_raises_once_they_are_read(pipe, reader, writer):
    writer.send(b"last words")
    writer.send(b"")
    pipe.close_writer()
    assert reader.recv() == b"last words"
    assert reader.recv() == b""
    with pytest.raises(EOFError):
        reader.recv()
    with pytest.raises(EOFError):
        reader.recv()
