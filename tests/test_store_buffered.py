"""Buffered record writes of the file store: records reach the file (page cache) on flush_writes,
sync, reads, close(sync=False) and truncation, and one pwritev covers a batch."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from dledger.store import Entry
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
