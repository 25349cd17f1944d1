"""Wide info rows: a worker's own memory area for infos too large for a row.

The shared block gives each env a row of
:data:`~vecpool._wire.info_columns.INFO_ROW_BYTES` bytes for its step info
(vecpool/_wire/info_columns.py). An info with a large array (a rendered frame, a
depth map, ``BigInfoEnv``'s 1 MiB) does not fit; pickling it and pushing it
through a pipe costs 30x what Gymnasium's ``SyncVectorEnv`` pays. Its size is not
known when the block is laid out, so:

1. The worker meets such an info, sends it pickled, and *offers* an area: an
   anonymous ``memfd`` holding one wide row per hosted env, named in its reply
   (:class:`WideOffer`: its pid, descriptor number and sizes).
2. The parent maps the area through ``/proc/<pid>/fd/<fd>`` (:func:`map_offer`);
   if it cannot, nothing changes and those infos stay pickled. If it can, its next
   full step command to that worker carries the acceptance
   (:func:`acceptance`: ``b"w"`` and the offer's serial number).
3. The worker switches to the area on that command (:meth:`WideArea.accept`), so
   the step that carries the acceptance is the first one whose wide rows the
   parent reads from it. A larger info later makes a larger offer, accepted the
   same way. An acceptance that names another offer (its reply was lost to an env
   error or a timeout; a predecessor's, re-sent to a replacement worker) makes the
   worker stop writing wide rows and offer again: the ids it writes then say
   "pickled", so the parent never reads an area the worker does not write.

A ``memfd`` has no name: it goes when the last process that maps or holds it does,
so no crash, kill or parent death can leave it behind, and it is not bounded by
the size of ``/dev/shm`` (64 MiB in a default Docker container). Where there is
no ``memfd`` (:data:`WIDE_INFOS` is false) wide infos always travel pickled.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
import sys
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

__all__ = [
    "ACCEPT",
    "ACCEPTANCE_BYTES",
    "WIDE_AREA_MAX_BYTES",
    "WIDE_INFOS",
    "WideArea",
    "WideOffer",
    "acceptance",
    "accepted_serial",
    "map_offer",
]

WIDE_INFOS = hasattr(os, "memfd_create") and sys.platform.startswith("linux")
"""Whether wide rows are possible here (Linux, with ``memfd_create``)."""

WIDE_AREA_MAX_BYTES = 1 << 30
"""The largest area a worker offers (1 GiB): larger needs travel pickled."""

ACCEPT = b"w"
"""Marks the acceptance appended to a step command (then the ``uint32`` serial)."""

_SERIAL = struct.Struct("<I")

ACCEPTANCE_BYTES = 1 + _SERIAL.size
"""Length of an acceptance (:func:`acceptance`)."""
_ALIGN = 64


class WideOffer(NamedTuple):
    """A worker's offer of wide rows, sent in its reply to a step.

    Attributes:
        pid: The worker's process id.
        fd: The area's descriptor number in the worker.
        stride: Bytes of each env's wide row.
        rows: Number of rows (the worker's hosted envs, in order).
        serial: This worker's count of offers: what the acceptance names (a
            descriptor number can be reused).
    """

    pid: int
    fd: int
    stride: int
    rows: int
    serial: int = 0


class WideArea:
    """A worker's side of wide rows: what it offered, and the area in use.

    Attributes:
        rows: The area in use (one row of :attr:`stride` bytes per hosted env),
            or ``None`` before any acceptance.
        stride: Bytes of each row in use (0: none).
    """

    def __init__(self, count: int) -> None:
        """No area yet for a worker hosting ``count`` envs."""
        self.count = count
        self.rows: memoryview | None = None
        self.stride = 0
        self._wanted = 0  # the largest wide schema met, in bytes
        self._offered = 0  # stride of the last offer made
        # serial, fd, map and stride of the pending offer
        self._offer: tuple[int, int, mmap.mmap, int] | None = None
        self._used: tuple[int, mmap.mmap] | None = None  # fd and map in use
        self._serial = 0  # numbers every offer this worker makes

    def want(self, nbytes: int) -> bool:
        """Note a wide schema of ``nbytes``; return whether the area in use fits it.

        A schema no area could hold (over :data:`WIDE_AREA_MAX_BYTES` for all the
        hosted envs) is not noted: it travels pickled, and smaller ones still get
        their area.
        """
        if nbytes <= self.stride:
            return True
        if nbytes * self.count <= WIDE_AREA_MAX_BYTES:
            self._wanted = max(self._wanted, nbytes)
        return False

    def offer(self) -> WideOffer | None:
        """A new offer if a wide schema met needs one (at most once per size).

        The stride grows by half at least, so an info that grows a little on
        every step costs a few offers, not one every few steps.
        """
        wanted = -(-self._wanted // _ALIGN) * _ALIGN
        if not WIDE_INFOS or wanted <= max(self.stride, self._offered):
            return None
        grown = -(-max(self.stride, self._offered) * 3 // 2 // _ALIGN) * _ALIGN
        stride = max(wanted, min(grown, WIDE_AREA_MAX_BYTES // self.count))
        stride = stride // _ALIGN * _ALIGN if stride > wanted else stride
        self._offered = stride
        size = stride * self.count
        try:
            fd = os.memfd_create("vecpool-infos", os.MFD_CLOEXEC)
        except OSError:
            return None
        try:
            os.ftruncate(fd, size)
            area = mmap.mmap(fd, size)
        except OSError:
            os.close(fd)
            return None
        self._drop_offer()
        self._serial += 1
        self._offer = (self._serial, fd, area, stride)
        return WideOffer(os.getpid(), fd, stride, self.count, self._serial)

    def accept(self, serial: int) -> None:
        """Switch to the offered area if the parent accepted it (by its serial).

        An acceptance of anything else (an offer whose reply the parent never
        read, a predecessor's) means the parent reads an area this worker does not
        write: stop writing wide rows, and offer afresh.
        """
        if self._offer is None or self._offer[0] != serial:
            self._drop_offer()
            self._drop_used()
            self.stride = self._offered = 0
            return
        _, fd, area, stride = self._offer
        self._offer = None
        self._drop_used()
        self._used = (fd, area)
        self.rows = memoryview(area)
        self.stride = stride

    def _drop_offer(self) -> None:
        if self._offer is not None:
            _, fd, area, _ = self._offer
            self._offer = None
            _close(fd, area)

    def _drop_used(self) -> None:
        if self._used is not None:
            fd, area = self._used
            self._used = None
            if self.rows is not None:
                self.rows.release()
                self.rows = None
            _close(fd, area)

    def close(self) -> None:
        """Unmap and close every area (the parent's mappings stay valid)."""
        self._drop_offer()
        self._drop_used()
        self.stride = 0


def _close(fd: int, area: mmap.mmap) -> None:
    with contextlib.suppress(BufferError, OSError, ValueError):
        area.close()
    with contextlib.suppress(OSError):
        os.close(fd)


def acceptance(offer: WideOffer) -> bytes:
    """What a step command appends to accept ``offer``."""
    return ACCEPT + _SERIAL.pack(offer.serial)


def accepted_serial(tail: bytes | memoryview) -> int | None:
    """The offer an acceptance (a step command's tail) names, if any."""
    if len(tail) == 1 + _SERIAL.size and tail[:1] == ACCEPT:
        (fd,) = _SERIAL.unpack_from(tail, 1)
        return int(fd)
    return None


def map_offer(offer: WideOffer) -> npt.NDArray[np.uint8] | None:
    """The parent's view of an offered area (``[rows, stride]``), or ``None``.

    ``None`` when it cannot be mapped (``/proc`` hidden, the worker gone, a
    size that does not match): the worker's wide infos then stay pickled.
    """
    if not WIDE_INFOS or offer.stride <= 0 or offer.rows <= 0:
        return None
    size = offer.stride * offer.rows
    try:
        fd = os.open(f"/proc/{offer.pid}/fd/{offer.fd}", os.O_RDWR)
    except OSError:
        return None
    try:
        # the worker's own area, of the size it says (not a descriptor reused since)
        target = os.readlink(f"/proc/{offer.pid}/fd/{offer.fd}")
        if (
            not target.startswith("/memfd:vecpool-infos")
            or os.fstat(fd).st_size != size
        ):
            return None
        area = mmap.mmap(fd, size)
    except OSError:
        return None
    finally:
        os.close(fd)
    return np.frombuffer(area, np.uint8).reshape(offer.rows, offer.stride)
