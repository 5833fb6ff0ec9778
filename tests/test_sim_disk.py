"""The simulated disk under the real FileLogStore and term/vote file: a crash loses what was not
fsynced, can tear the last write and flip bits; recovery and the CRC checks deal with it."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from store_records import next_pos

from dledger.simdisk import SimDisk
from dledger.store import CorruptionError, Entry, StoreError
from dledger.store.file import FileLogStore
from dledger.store.hardstate import HardState

DIR = Path("/sim/n1")
SIZES = {"data_file_size": 64 * 1024, "index_file_size": 4096}


def store(disk: SimDisk) -> FileLogStore:
    return FileLogStore(DIR, fs=disk, **SIZES)


def fill(st: FileLogStore, lo: int, hi: int, term: int = 1) -> None:
    for i in range(lo, hi):
        st.append(Entry(i, term, b"v%d" % i * 10))


def test_a_crash_keeps_what_was_synced_and_loses_the_rest() -> None:
    disk = SimDisk(random.Random(1))
    st = store(disk)
    fill(st, 0, 10)
    st.sync()
    fill(st, 10, 15)
    st.flush_writes()  # in the page cache, not on the disk
    disk.crash()
    r = store(disk)
    assert r.end_index == 9
    assert [r.get(i).body for i in range(10)] == [b"v%d" % i * 10 for i in range(10)]


def test_torn_writes_are_cut_by_recovery_and_never_read_back() -> None:
    cut = 0
    for seed in range(20):
        disk = SimDisk(random.Random(seed))
        st = store(disk)
        fill(st, 0, 10)
        st.sync()
        fill(st, 10, 15)
        st.flush_writes()
        disk.crash(tear_probability=1.0)
        r = store(disk)
        assert 9 <= r.end_index <= 14
        for i in range(r.end_index + 1):
            assert r.get(i).body == b"v%d" % i * 10  # whatever survived is whole (CRC checked)
        cut += r.recovery.cut_reason is not None
        fill(r, r.end_index + 1, r.end_index + 3, term=2)  # and the log goes on after the cut
        r.sync()
    assert disk.torn and cut > 0


def test_a_flipped_bit_in_the_committed_prefix_stops_the_store() -> None:
    disk = SimDisk(random.Random(3))
    st = store(disk)
    fill(st, 0, 20)
    st.sync()
    st.save_checkpoint(19)
    end = next_pos(st)
    disk.crash()
    assert disk.flip_bit(str(DIR / "data"), below=end) is not None
    with pytest.raises((CorruptionError, StoreError)):
        store(disk)


def test_term_and_vote_survive_a_crash_once_saved() -> None:
    disk = SimDisk(random.Random(4))
    hs = HardState(DIR, fs=disk)
    hs.save(3, "n2")
    disk.crash(tear_probability=1.0)
    tv = HardState(DIR, fs=disk).load()
    assert (tv.curr_term, tv.voted_for) == (3, "n2")


def test_a_name_is_lost_in_a_crash_until_its_directory_is_fsynced() -> None:
    disk = SimDisk(random.Random(5))
    fd = disk.open(DIR / "f", os.O_RDWR | os.O_CREAT)
    disk.pwrite(fd, b"abc", 0)
    disk.fsync(fd)
    disk.crash()
    with pytest.raises(FileNotFoundError):
        disk.read_at(DIR / "f", 0)
    fd = disk.open(DIR / "f", os.O_RDWR | os.O_CREAT)
    disk.pwrite(fd, b"abc", 0)
    disk.fsync(fd)
    disk.fsync_dir(DIR)
    disk.crash()
    assert disk.read_at(DIR / "f", 0) == b"abc"


def test_recovery_reads_the_high_water_mark_through_the_store_file_system() -> None:
    """The high-water file is read through the store's file system, as every other file: on the
    simulated disk recovery reads no data past the mark (it read the host's file system before,
    found nothing there and scanned whole files, so ``chaos sim`` never ran the limited scan the
    server runs)."""
    from dledger.store.file import HIGHWATER_DATA_STEP

    disk = SimDisk(random.Random(5))
    big = {"data_file_size": 16 * HIGHWATER_DATA_STEP, "index_file_size": 1 << 20}
    st = FileLogStore(DIR, fs=disk, **big)
    fill(st, 0, 50)
    st.sync()
    st.save_checkpoint(49)
    disk.crash()
    again = FileLogStore(DIR, fs=disk, **big)
    assert again.end_index == 49
    assert 0 < again.recovery.bytes_read <= HIGHWATER_DATA_STEP < big["data_file_size"]
