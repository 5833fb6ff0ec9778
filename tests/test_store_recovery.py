"""FileLogStore recovery: torn tails and bit flips are cut beyond the committed index, raise
CorruptionError inside it; the index is rebuilt from the data."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from store_records import encode_entry

from dledger.store import CorruptionError, Entry, codec
from dledger.store.file import FileLogStore

KB64 = 64 * 1024


def open_store(path: Path) -> FileLogStore:
    return FileLogStore(path, data_file_size=KB64, index_file_size=KB64)


def build(path: Path, n: int = 200, committed: int = 99) -> list[Entry]:
    """n ~1 KiB entries, all synced, checkpoint committedIndex=committed; returns stored entries."""
    s = open_store(path)
    out = [s.append(Entry(i, 1 + i // 40, f"v{i:05d}".encode() * 170)) for i in range(n)]
    s.sync()
    assert s.save_checkpoint(committed) == committed
    s.close()
    return out


def data_file(path: Path, pos: int) -> tuple[Path, int]:
    start = pos - pos % KB64
    return path / "data" / f"{start:020d}", pos - start


def flip(p: Path, offset: int, mask: int = 0x04) -> None:
    with open(p, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ mask]))


def test_torn_write_at_the_tail_is_cut(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    entries = build(tmp_path)
    last = entries[-1]
    p, rel = data_file(tmp_path, last.pos)
    os.truncate(p, rel + 30)  # the last record is torn mid-header
    with caplog.at_level(logging.WARNING, logger="dledger.store"):
        s = open_store(tmp_path)
    rep = s.recovery
    assert (s.end_index, rep.cut_file, rep.cut_offset) == (198, str(p), rel)
    assert "short of" in (rep.cut_reason or "")
    assert str(p) in caplog.text and f"offset {rel}" in caplog.text
    assert p.stat().st_size == KB64  # re-extended
    assert p.read_bytes()[rel:] == bytes(KB64 - rel)
    assert s.get(198).body == entries[198].body
    # The slot is reusable at the same pos, as a follower receiving the entry again would.
    again = s.append(Entry(199, last.term, last.body, pos=last.pos))
    assert again.pos == last.pos
    s.close()
    assert open_store(tmp_path).recovery.clean


def test_torn_body_inside_a_full_size_file_is_cut(tmp_path: Path) -> None:
    entries = build(tmp_path)
    last = entries[-1]
    p, rel = data_file(tmp_path, last.pos)
    with open(p, "r+b") as f:  # the tail of the body never reached the disk
        f.seek(rel + last.size - 100)
        f.write(bytes(100))
    s = open_store(tmp_path)
    assert s.end_index == 198 and "bodyCrc" in (s.recovery.cut_reason or "")
    s.close()


def test_bit_flip_in_the_uncommitted_tail_is_cut(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    entries = build(tmp_path, committed=99)
    victim = entries[150]
    p, rel = data_file(tmp_path, victim.pos)
    flip(p, rel + 48 + 10)
    with caplog.at_level(logging.WARNING, logger="dledger.store"):
        s = open_store(tmp_path)
    assert s.end_index == 149 and s.end_term == entries[149].term
    assert s.recovery.cut_pos == victim.pos
    assert "bodyCrc" in caplog.text and str(p) in caplog.text
    # Later files are gone, the rest of the cut file is zero.
    assert max(int(q.name) for q in (tmp_path / "data").iterdir()) == victim.pos - rel
    assert p.read_bytes()[rel:] == bytes(KB64 - rel)
    assert s.recovery.removed_files
    s.close()


def test_bit_flip_in_the_committed_prefix_raises(tmp_path: Path) -> None:
    entries = build(tmp_path, committed=99)
    victim = entries[42]
    p, rel = data_file(tmp_path, victim.pos)
    flip(p, rel + 48 + 3)
    with pytest.raises(CorruptionError) as ei:
        open_store(tmp_path)
    msg = str(ei.value)
    assert str(p) in msg and f"offset {rel}" in msg and "entry 42" in msg and "bodyCrc" in msg
    assert "committedIndex=99" in msg
    # Nothing was cut: the data is left for repair.
    flip(p, rel + 48 + 3)
    assert open_store(tmp_path).end_index == 199


def test_header_flip_in_committed_prefix_raises(tmp_path: Path) -> None:
    entries = build(tmp_path, committed=99)
    p, rel = data_file(tmp_path, entries[10].pos)
    flip(p, rel + 16 + 7)  # term field
    with pytest.raises(CorruptionError, match="entry 10"):
        open_store(tmp_path)


@pytest.mark.parametrize("field", [16 + 1, 16 + 7])  # the term's high bits, its low bits
def test_a_damaged_term_of_the_first_record_after_compaction_is_caught(tmp_path: Path, field: int) -> None:
    """The log's first record after a compaction has no chainCrc to check (the entry before it is
    gone): a flipped term in its header passed, and the member served a committed entry
    under another term (chaos sim seed 1189: two entries committed at one index). Its index record
    (durable before the checkpoint named it) must agree, else the damage is repaired or refused."""
    build(tmp_path, committed=150)
    s = open_store(tmp_path)
    begin = s.compact_prefix(140)
    assert begin > 0 and s.begin_index == begin
    first = s.get(begin)
    s.close()
    p, rel = data_file(tmp_path, first.pos)
    flip(p, rel + field, 0x20)
    with pytest.raises(CorruptionError, match=f"entry {begin}: header disagrees with its index record"):
        open_store(tmp_path)
    r = FileLogStore(tmp_path, data_file_size=KB64, index_file_size=KB64, repair=True)
    assert r.end_index == begin - 1 and r.repair_to >= 150 and r.recovery.damaged_from == begin
    assert r.salvaged[begin + 1].body == f"v{begin + 1:05d}".encode() * 170  # the intact ones kept
    r.close()


def test_divergent_record_is_caught_by_the_chain_crc(tmp_path: Path) -> None:
    # A record replaced by a self-consistent one (right bodyCrc, same size) breaks the chain of
    # the next entry: divergent history, not just bit rot, is detected.
    entries = build(tmp_path, committed=-1)
    e = entries[120]
    fake = Entry(e.index, e.term, bytes(len(e.body)), e.magic)
    rec, _ = encode_entry(fake, e.pos, prev_chain=12345)
    p, rel = data_file(tmp_path, e.pos)
    with open(p, "r+b") as f:
        f.seek(rel)
        f.write(rec)
    s = open_store(tmp_path)
    assert s.end_index == 119 and "chainCrc" in (s.recovery.cut_reason or "")
    s.close()


def test_lost_committed_entries_raise(tmp_path: Path) -> None:
    entries = build(tmp_path, committed=150)
    p, rel = data_file(tmp_path, entries[140].pos)
    os.truncate(p, rel)
    for q in (tmp_path / "data").iterdir():
        if int(q.name) > int(p.name):
            q.unlink()
    with pytest.raises(CorruptionError, match=r"entry 140: .*committedIndex=150"):
        open_store(tmp_path)


def test_index_is_rebuilt_from_the_data(tmp_path: Path) -> None:
    entries = build(tmp_path)
    idx = tmp_path / "index" / ("0" * 20)
    with open(idx, "r+b") as f:
        f.seek(77 * 32 + 12)
        f.write(b"\xff" * 8)
        f.seek(190 * 32)
        f.write(b"\x00" * 320)
    s = open_store(tmp_path)
    assert s.recovery.index_rebuilt_from == 77 and s.end_index == 199
    raw = idx.read_bytes()
    for e in entries:
        assert codec.decode_index(raw, e.index * 32) == (e.magic, e.pos, e.size, e.index, e.term)
    s.close()
    assert open_store(tmp_path).recovery.clean


def test_deleted_index_and_stale_index_records_are_repaired(tmp_path: Path) -> None:
    build(tmp_path, committed=10)
    idx = tmp_path / "index" / ("0" * 20)
    idx.unlink()
    s = open_store(tmp_path)
    assert s.recovery.index_rebuilt_from == 0
    s.truncate_suffix(149)
    s.close()
    raw = idx.read_bytes()
    assert raw[150 * 32 :] == bytes(len(raw) - 150 * 32)
    assert open_store(tmp_path).recovery.clean


def test_crash_between_padding_and_next_file(tmp_path: Path) -> None:
    entries = build(tmp_path, committed=-1)
    # The entry that starts file 1: remove that file, leaving the blank padding at the end of file 0.
    first_in_1 = next(e for e in entries if e.pos >= KB64)
    for q in (tmp_path / "data").iterdir():
        if int(q.name) >= KB64:
            q.unlink()
    s = open_store(tmp_path)
    assert s.end_index == first_in_1.index - 1
    assert "blank padding" in (s.recovery.cut_reason or "")
    # The follower path re-creates exactly the same padding and file.
    again = s.append(Entry(first_in_1.index, first_in_1.term, first_in_1.body, pos=first_in_1.pos))
    assert again.pos == KB64
    s.close()


def test_kill_without_sync_loses_nothing_written(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # A SIGKILLed server leaves its pwrite()s in the page cache but loses the buffered index
    # records: recovery keeps every entry and rebuilds the index tail quietly.
    s = open_store(tmp_path)
    for i in range(300):
        s.append(Entry(i, 1, b"%d" % i))
    s.sync()
    for i in range(300, 350):
        s.append(Entry(i, 2, b"%d" % i))
    s.close(sync=False)
    with caplog.at_level(logging.INFO, logger="dledger.store"):
        r = open_store(tmp_path)
    assert r.end_index == 349 and r.get(349).body == b"349"
    assert r.recovery.index_rebuilt_from == 300 and r.recovery.index_behind and r.recovery.clean
    assert not [rec for rec in caplog.records if rec.levelno >= logging.WARNING]
    r.close()


def test_torn_write_with_lost_header_page_is_cut(tmp_path: Path) -> None:
    # Page-granular writeback: the header of the last record never reached the disk, a later part
    # of its body did. The scan must not take the zero header for a clean end and leave garbage.
    entries = build(tmp_path, committed=99)
    last = entries[-1]
    p, rel = data_file(tmp_path, last.pos)
    with open(p, "r+b") as f:
        f.seek(rel)
        f.write(bytes(codec.HEADER_SIZE))
    s = open_store(tmp_path)
    assert s.end_index == 198 and "torn write" in (s.recovery.cut_reason or "")
    assert p.read_bytes()[rel:] == bytes(KB64 - rel)
    s.close()


def test_verify_only_the_newest_files(tmp_path: Path) -> None:
    entries = build(tmp_path, n=400, committed=350)  # ~7 data files

    def reopen() -> FileLogStore:
        return FileLogStore(
            tmp_path, data_file_size=KB64, index_file_size=KB64, verify_files=3, cache_entries=0
        )

    s = reopen()
    rep = s.recovery
    assert rep.trusted_files == len(list((tmp_path / "data").iterdir())) - 3 > 0
    assert rep.entries_checked < 400 and s.end_index == 399 and rep.clean
    for e in entries[::37]:
        got = s.get(e.index)
        assert (got.pos, got.term, got.body) == (e.pos, e.term, e.body)
    s.close()
    # Damage in a trusted (old) file is not scanned at open but is never served.
    p, rel = data_file(tmp_path, entries[5].pos)
    flip(p, rel + 100)
    s = reopen()
    with pytest.raises(CorruptionError, match="entry 5"):
        s.get(5)
    s.close()
    flip(p, rel + 100)
    # An index that disagrees with the data falls back to checking everything.
    idx = tmp_path / "index" / ("0" * 20)
    with open(idx, "r+b") as f:
        f.seek(20 * 32 + 4)
        f.write(b"\x00" * 8)
    s = reopen()
    assert s.recovery.trusted_files == 0 and s.recovery.entries_checked == 400
    assert s.recovery.index_rebuilt_from == 20 and s.get(20).body == entries[20].body
    s.close()


def test_a_crash_right_after_reset_keeps_the_new_begin() -> None:
    """Issue 33 (chaos sim seed 1180): ``reset`` (INSTALL_SNAPSHOT) recorded the new begin in the
    checkpoint while removing the old segments and creating the new one was not durable yet; a
    crash brought the old files back under a checkpoint calling them committed, and recovery cut
    and "repaired" a prefix no fault had damaged. On a simulated disk that loses every name whose
    directory was not fsynced, the restarted log now begins where the reset put it."""
    import random

    from dledger.simdisk import SimDisk

    disk = SimDisk(random.Random(1))
    d = Path("/sim/x")
    st = FileLogStore(d, fs=disk, data_file_size=4096, index_file_size=4096)
    for i in range(40):
        st.append(Entry(i, 1, b"v%d" % i))
    st.sync()
    st.save_checkpoint(39)
    st.reset(100, 3 * 4096 + 512, 2)
    disk.crash(0.0, 1.0)
    again = FileLogStore(d, fs=disk, data_file_size=4096, index_file_size=4096)
    assert again.repair_to == -1
    assert (again.begin_index, again.end_index) == (100, 99)
