"""Buffered record writes of the file store: records reach the file (page cache) on flush_writes,
sync, reads, close(sync=False) and truncation, and one pwritev covers a batch."""

from __future__ import annotations

import errno
import os
import random
from collections.abc import Sequence
from pathlib import Path

import pytest

from dledger.simdisk import SimDisk
from dledger.store import Entry, StoreError
from dledger.store.file import FileLogStore
from dledger.store.fs import OsFileSystem


def on_disk(path: Path, pos: int, n: int) -> bytes:
    with open(path / "data" / ("0" * 20), "rb") as f:  # another open file: what the kernel holds
        f.seek(pos)
        return f.read(n)


def test_records_reach_the_file_on_flush_writes(tmp_path: Path) -> None:
    s = FileLogStore(tmp_path)
    e = s.append(Entry(0, 1, b"hello"))
    assert on_disk(tmp_path, e.pos, e.size) == bytes(e.size)  # still buffered
    s.flush_writes()
    assert on_disk(tmp_path, e.pos + 48, 5) == b"hello"
    s.close()


def test_reads_sync_truncate_and_close_write_the_buffer(tmp_path: Path) -> None:
    s = FileLogStore(tmp_path, cache_entries=0)
    for i in range(10):
        s.append(Entry(i, 1, b"v%d" % i))
    assert s.get(3).body == b"v3"  # not cached: the read writes the buffer first
    s.append(Entry(10, 1, b"v10"))
    s.truncate_suffix(9)
    assert s.end_index == 9 and s.get(9).body == b"v9"
    s.append(Entry(10, 2, b"w10"))
    s.close(sync=False)  # like a killed process: what was written is in the page cache
    r = FileLogStore(tmp_path)
    assert r.end_index == 10 and r.get(10).body == b"w10" and r.term_at(10) == 2
    r.close()


def test_one_pwritev_per_batch(tmp_path: Path) -> None:
    calls: list[int] = []

    class Counting(OsFileSystem):
        @staticmethod
        def pwritev(fd: int, bufs: Sequence[bytes], off: int) -> int:
            calls.append(len(bufs))
            return os.pwritev(fd, bufs, off)

    s = FileLogStore(tmp_path, fs=Counting())
    for i in range(100):
        s.append(Entry(i, 1, b"x" * 100))
    s.sync()
    assert calls == [200]  # header + body of 100 records in one call
    s.close()
    r = FileLogStore(tmp_path)
    assert r.end_index == 99 and r.recovery.clean
    r.close()


def test_a_refused_write_keeps_the_records_for_the_next_one() -> None:
    """A buffered write the disk refuses (ENOSPC) leaves the records in the buffer, which end_index
    still counts: no sync calls them durable before they were written, and once the disk has room
    the next sync writes them (before, the buffer was dropped and the sync claimed them)."""
    disk = SimDisk(random.Random(1))
    s = FileLogStore(Path("/m"), fs=disk)
    for i in range(3):
        s.append(Entry(i, 1, b"v%d" % i))
    disk.failing = "full"
    with pytest.raises(StoreError):
        s.flush_writes()
    with pytest.raises(StoreError):
        s.sync()
    assert (s.end_index, s.synced_index) == (2, -1)
    disk.failing = None
    assert s.sync() == 2
    assert s.save_checkpoint(2) == 2
    disk.crash()  # power loss: only what was fsynced is left
    r = FileLogStore(Path("/m"), fs=disk)
    assert r.end_index == 2 and [r.get(i).body for i in range(3)] == [b"v0", b"v1", b"v2"]
    assert r.recovery.cut_reason is None


def test_a_write_refused_inside_append_keeps_the_earlier_records() -> None:
    """The entry whose write failed is not appended, the ones before it stay (buffered, counted):
    a segment rollover flushes the buffer first, and the disk refuses it."""
    disk = SimDisk(random.Random(2))
    s = FileLogStore(Path("/m"), fs=disk, data_file_size=4096)
    i = 0
    while s.get(i - 1).pos + 2 * (48 + 500) + 8 <= 4096 if i else True:
        s.append(Entry(i, 1, b"%03d" % i + b"x" * 497))
        i += 1
    disk.failing = "full"
    with pytest.raises(StoreError):
        s.append(Entry(i, 1, b"y" * 500))  # does not fit the file: padding, a new file
    assert s.end_index == i - 1
    disk.failing = None
    s.append(Entry(i, 1, b"y" * 500))
    assert s.sync() == i
    s.save_checkpoint(i)
    disk.crash()
    r = FileLogStore(Path("/m"), fs=disk, data_file_size=4096)
    assert r.end_index == i and r.get(i).body == b"y" * 500
    assert [r.get(k).body[:3] for k in range(i)] == [b"%03d" % k for k in range(i)]


def test_a_refused_write_after_a_rollover_retries_in_the_new_file(tmp_path: Path) -> None:
    """Padding done and the new data file created, the entry's own write refused: the next append
    goes to the start of the new file (before, it went to the old position, outside the file)."""
    refuse = [True]

    class Refusing(OsFileSystem):
        @staticmethod
        def pwritev(fd: int, bufs: Sequence[bytes], off: int) -> int:
            if refuse[0] and sum(map(len, bufs)) >= 1 << 20:
                raise OSError(errno.ENOSPC, "No space left on device")
            return os.pwritev(fd, bufs, off)

    size = 2 << 20
    s = FileLogStore(tmp_path, fs=Refusing(), data_file_size=size)
    s.append(Entry(0, 1, b"a" * 1000))
    big = Entry(1, 1, b"b" * (size - 600))  # fits a file, not the rest of the first one
    with pytest.raises(StoreError):
        s.append(big)
    refuse[0] = False
    stored = s.append(big)
    assert stored.pos == size and s.sync() == 1
    s.close()
    r = FileLogStore(tmp_path, data_file_size=size)
    assert r.end_index == 1 and r.get(1).body == big.body and r.recovery.clean
    r.close()
