"""Hostile pool files: memory stays bounded, every refusal is one ValueError.

``ReplayPool.load`` reads a member's ``.npy`` header before its data and checks
the declared size against the zip entry, the pool header and this machine
(vecpool/replay/files.py ``_Archive``), so a zip bomb or a forged shape is refused
before it is decompressed or allocated. Peak memory is measured in a fresh
process (``ru_maxrss``), never a duration.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces

import vecpool

BOMB_BYTES = 256 * 2**20


def _saved(tmp_path: Path) -> Path:
    pool = vecpool.ReplayPool(
        spaces.Box(0, 1, (4,), np.float32), spaces.Discrete(2), 2, 64
    )
    for _ in range(10):
        obs = np.zeros((2, 4), np.float32)
        pool.add(obs, np.zeros(2, np.int64), obs, np.ones(2), [False] * 2, [False] * 2)
    return pool.save(tmp_path / "good.npz")


def _npy_header(shape: tuple[int, ...], dtype: str = "<f4") -> bytes:
    header = {"descr": dtype, "fortran_order": False, "shape": shape}
    text = repr(header).encode()
    text += b" " * (-(len(text) + 11) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text


def _rewrite(source: Path, target: Path, replace: dict[str, bytes | None]) -> Path:
    """Copy ``source`` with members replaced (raw bytes: a ``.npy`` file each)."""
    with (
        zipfile.ZipFile(source) as old,
        zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as new,
    ):
        for entry in old.infolist():
            name = entry.filename[:-4]
            if name not in replace:
                new.writestr(entry.filename, old.read(entry))
            elif (data := replace[name]) is not None:
                new.writestr(entry.filename, data)
        for name, data in replace.items():
            if f"{name}.npy" not in old.namelist() and data is not None:
                new.writestr(f"{name}.npy", data)
    return target


def _bomb(source: Path, target: Path, member: str) -> Path:
    """``member`` replaced by BOMB_BYTES of deflated zeros (a consistent .npy)."""
    _rewrite(source, target, {member: None})
    with (
        zipfile.ZipFile(target, "a", zipfile.ZIP_DEFLATED, compresslevel=1) as archive,
        archive.open(f"{member}.npy", "w", force_zip64=True) as out,
    ):
        out.write(_npy_header((BOMB_BYTES // 4,)))
        zeros = bytes(4 * 2**20)
        for _ in range(BOMB_BYTES // len(zeros)):
            out.write(zeros)
    return target


def _peak_growth_mib(path: Path) -> tuple[float, str]:
    """Load ``path`` in a fresh process: (peak RSS growth in MiB, the error)."""
    code = textwrap.dedent(
        f"""
        import resource, vecpool
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            vecpool.ReplayPool.load({str(path)!r})
            error = "loaded"
        except ValueError as exc:
            error = str(exc)
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print((after - before) / 1024)
        print(error)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    return float(out[0]), out[1]


@pytest.mark.parametrize("member", ["obs_0", "reward", "config"])
def test_a_zip_bomb_is_refused_before_it_is_decompressed(tmp_path, member):
    bomb = _bomb(_saved(tmp_path), tmp_path / "bomb.npz", member)
    assert bomb.stat().st_size < BOMB_BYTES // 100  # a bomb indeed
    growth, error = _peak_growth_mib(bomb)
    assert error.startswith(f"Cannot load {str(bomb)!r}"), error
    assert growth < 32, f"loading raised peak memory by {growth:.0f} MiB"


def test_a_huge_declared_shape_is_a_value_error_not_a_memory_error(tmp_path):
    forged = _rewrite(
        _saved(tmp_path), tmp_path / "forged.npz", {"obs_0": _npy_header((2**45,))}
    )
    with pytest.raises(ValueError, match="Cannot load") as info:
        vecpool.ReplayPool.load(forged)
    assert "obs_0" in str(info.value)
    assert str(forged) in str(info.value)


def test_a_header_describing_a_pool_too_large_for_the_machine(tmp_path):
    good = _saved(tmp_path)
    with zipfile.ZipFile(good) as archive:
        config = np.lib.format.read_array(archive.open("config.npy"))
    header = json.loads(config.tobytes())
    header["pool_size"] = 2**50
    data = json.dumps(header).encode()
    buffer = _npy_header((len(data),), "|u1") + data
    forged = _rewrite(good, tmp_path / "big.npz", {"config": buffer})
    with pytest.raises(ValueError, match="more than this machine's memory"):
        vecpool.ReplayPool.load(forged)


def test_an_object_array_says_what_it_is_not_how_to_unpickle(tmp_path):
    path = tmp_path / "objects.npz"
    np.savez(path, config=np.array([{"a": 1}], dtype=object))
    with pytest.raises(ValueError, match="Python objects") as info:
        vecpool.ReplayPool.load(path)
    assert "allow_pickle" not in str(info.value)


@pytest.mark.parametrize("seed", range(20))
def test_random_bytes_and_truncations_are_one_value_error(tmp_path, seed):
    good = _saved(tmp_path).read_bytes()
    rng = np.random.default_rng(seed)
    kind = seed % 3
    if kind == 0:
        data = rng.bytes(int(rng.integers(0, 4096)))
    elif kind == 1:
        data = good[: int(rng.integers(0, len(good)))]
    else:
        flipped = bytearray(good)
        for position in rng.integers(0, len(good), 3):
            flipped[position] ^= 0xFF
        data = bytes(flipped)
    path = tmp_path / "bad.npz"
    path.write_bytes(data)
    error: ValueError | None = None
    try:
        vecpool.ReplayPool.load(path)  # a flip may land where nothing is checked
    except ValueError as exc:  # anything else (MemoryError, KeyError) fails
        error = exc
    assert error is None or str(path) in str(error)


def test_a_zip_version_zipfile_refuses_is_a_value_error(tmp_path):
    # a flipped byte in the central directory's "version needed to extract" made
    # zipfile raise NotImplementedError while the archive was opened (found when
    # format 6 moved the bytes the random flips above land on)
    data = bytearray(_saved(tmp_path).read_bytes())
    entry = data.index(b"PK\x01\x02")  # the first central directory entry
    data[entry + 6 : entry + 8] = (210).to_bytes(2, "little")  # "version 21.0"
    path = tmp_path / "future-zip.npz"
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="not a whole numpy archive") as info:
        vecpool.ReplayPool.load(path)
    assert str(path) in str(info.value)


def _config_member(good: Path) -> dict[str, Any]:
    with zipfile.ZipFile(good) as archive:
        config = np.lib.format.read_array(archive.open("config.npy"))
    header: dict[str, Any] = json.loads(config.tobytes())
    return header


def _with_config(good: Path, target: Path, header: dict[str, Any]) -> Path:
    data = json.dumps(header).encode()
    return _rewrite(good, target, {"config": _npy_header((len(data),), "|u1") + data})


def test_review_findings_on_the_loader_are_value_errors_with_no_growth(tmp_path):
    # found by a review of the loader: each once escaped as another exception
    # or took memory before any check (reproduced in a fresh process)
    good = _saved(tmp_path)
    cases = {}
    # a BZIP2 member (zipfile does not bound its output per read)
    bz2 = tmp_path / "bz2.npz"
    with zipfile.ZipFile(good) as old, zipfile.ZipFile(bz2, "w") as new:
        for entry in old.infolist():
            new.writestr(entry.filename, old.read(entry), zipfile.ZIP_BZIP2)
    cases["compression method 12"] = bz2
    # a .npy header that declares a 1 GiB header
    huge_header = b"\x93NUMPY\x02\x00" + (2**30).to_bytes(4, "little") + b"{" * 1000
    cases["a .npy header of"] = _rewrite(
        good, tmp_path / "hdr.npz", {"reward": huge_header}
    )
    # a Box of one bound and a huge shape (it would allocate its bounds)
    header = _config_member(good)
    header["observation_space"] = {
        "type": "Box", "low": 0.0, "high": 1.0, "shape": [2**17, 2**17], "dtype": "<f8"
    }  # fmt: skip
    cases["more than this machine's memory"] = _with_config(
        good, tmp_path / "box.npz", header
    )
    # a header of a million empty objects (parsing it builds them all)
    header = _config_member(good)
    header["junk"] = [0] * (2**20 + 10)  # "0, ": 3 bytes a value
    cases["JSON values"] = _with_config(good, tmp_path / "json.npz", header)
    for reason, path in cases.items():
        growth, error = _peak_growth_mib(path)
        assert error.startswith(f"Cannot load {str(path)!r}"), error
        assert reason in error, error
        assert growth < 32, f"{reason}: peak memory grew by {growth:.0f} MiB"


def test_uniform_box_bounds_are_one_number_in_the_header(tmp_path):
    header = _config_member(_saved(tmp_path))
    assert header["observation_space"]["low"] == 0.0
    box = spaces.Box(
        np.array([0.0, -1.0], np.float32), np.array([1.0, 2.0], np.float32)
    )
    pool = vecpool.ReplayPool(box, spaces.Discrete(2), 1, 4)
    loaded = vecpool.ReplayPool.load(pool.save(tmp_path / "b.npz"))
    assert loaded.observation_space == box


def test_a_device_or_a_fifo_is_refused_not_read_for_ever(tmp_path):
    # found by a tester: /dev/zero grew without bound, a FIFO blocked for ever
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in ("/dev/zero", fifo):
        with pytest.raises(ValueError, match="not a regular file"):
            vecpool.ReplayPool.load(path)


def test_save_load_keeps_large_uneven_bounds_and_refuses_other_keys(tmp_path):
    # found by a tester: 600k uneven Box bounds made a header load refused; a Dict
    # with tuple keys saved a file load could not read
    low = np.linspace(-1.0, 0.0, 600_000).astype(np.float32)
    box = spaces.Box(low, low + 1.0, dtype=np.float32)
    pool = vecpool.ReplayPool(box, spaces.Discrete(2), 1, 2)
    loaded = vecpool.ReplayPool.load(pool.save(tmp_path / "wide.npz"))
    assert loaded.observation_space == box
    keys: Any = {("a", 1): spaces.Discrete(2)}  # not str: what the check refuses
    keyed = spaces.Dict(keys)
    with pytest.raises(ValueError, match="keys that are not strings"):
        vecpool.ReplayPool(keyed, spaces.Discrete(2), 1, 2).save(tmp_path / "k.npz")
    assert not (tmp_path / "k.npz").exists()
