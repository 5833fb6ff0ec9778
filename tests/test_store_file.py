"""FileLogStore: appends, reads, padding, byte-identical replicas, truncation, compaction."""

from __future__ import annotations

import struct
import threading
from pathlib import Path

import pytest
from store_records import next_pos

from dledger.store import MAGIC_NOOP, CorruptionError, Entry, StoreError
from dledger.store.file import FileLogStore

KB64 = 64 * 1024


def open_store(path: Path, **kw: int) -> FileLogStore:
    return FileLogStore(path, data_file_size=kw.get("data", KB64), index_file_size=kw.get("index", 4096))


def body(i: int, n: int = 1000) -> bytes:
    return (f"{i:08d}" * (n // 8 + 1)).encode()[: n + i % 37]


def fill(s: FileLogStore, n: int, start: int = 0, term: int = 1) -> None:
    for i in range(start, start + n):
        s.append(Entry(i, term + i // 50, body(i)))


def file_bytes(d: Path) -> dict[str, bytes]:
    return {
        f"{sub}/{p.name}": p.read_bytes() for sub in ("data", "index") for p in sorted((d / sub).iterdir())
    }


def test_round_trip_and_reopen(tmp_path: Path) -> None:
    s = open_store(tmp_path)
    assert (s.begin_index, s.end_index, s.end_term) == (0, -1, -1)
    assert s.term_at(-1) == -1
    fill(s, 300)
    s.append(Entry(300, 9, b"", magic=MAGIC_NOOP))
    assert (s.end_index, s.end_term) == (300, 9)
    assert s.sync() == 300
    s.close()
    s = open_store(tmp_path)
    assert s.recovery.clean, s.recovery.describe()
    assert (s.end_index, s.end_term, s.recovery.entries_checked) == (300, 9, 301)
    for i in range(300):
        e = s.get(i)
        assert (e.index, e.term, e.body) == (i, 1 + i // 50, body(i))
        assert s.term_at(i) == e.term
    assert s.get(300).magic == MAGIC_NOOP
    with pytest.raises(IndexError):
        s.get(301)
    s.append(Entry(301, 9, b"more"))
    assert s.get(301).body == b"more"
    s.close()


def test_padding_at_segment_end_and_pos(tmp_path: Path) -> None:
    s = open_store(tmp_path)
    fill(s, 200)  # ~1 KiB each: several 64 KiB files
    files = sorted((tmp_path / "data").iterdir())
    assert len(files) >= 3
    assert all(p.stat().st_size == KB64 for p in files)
    assert [int(p.name) for p in files] == [i * KB64 for i in range(len(files))]
    # Entries never straddle a file; each file starts with a record whose pos is the file start.
    starts = {s.get(i).pos for i in range(200)}
    for p in files[1:]:
        assert int(p.name) in starts
    first = files[0].read_bytes()
    last_in_0 = max(s.get(i).pos + s.get(i).size for i in range(200) if s.get(i).pos < KB64)
    magic, length = struct.unpack(">ii", first[last_in_0 : last_in_0 + 8])
    assert (magic, length) == (-1, KB64 - last_in_0)
    assert first[last_in_0 + 8 :] == bytes(KB64 - last_in_0 - 8)
    s.close()


def test_replicas_fed_the_same_entries_have_identical_files(tmp_path: Path) -> None:
    leader, follower = open_store(tmp_path / "a"), open_store(tmp_path / "b")
    for i in range(250):
        stored = leader.append(Entry(i, 1 + i // 60, body(i, 700 + (i * 131) % 900)))
        follower.append(Entry(stored.index, stored.term, stored.body, pos=stored.pos))
    leader.close()
    follower.close()
    a, b = file_bytes(tmp_path / "a"), file_bytes(tmp_path / "b")
    assert a.keys() == b.keys() and len(a) > 3
    assert a == b


def test_follower_pos_and_index_are_checked(tmp_path: Path) -> None:
    s = open_store(tmp_path)
    s.append(Entry(0, 1, b"abc"))
    with pytest.raises(StoreError, match="at pos 10, expected 51"):
        s.append(Entry(1, 1, b"x", pos=10))
    with pytest.raises(StoreError, match="index 5, expected 1"):
        s.append(Entry(5, 1, b"x"))
    with pytest.raises(StoreError, match="does not fit"):
        s.append(Entry(1, 1, bytes(KB64)))
    assert s.end_index == 0
    s.close()


def test_truncate_then_append_equals_never_having_the_suffix(tmp_path: Path) -> None:
    # A follower that had a divergent suffix, truncated and re-appended, ends with exactly the
    # files of a follower that never had it (truncation zeroes what it removes).
    a, b = open_store(tmp_path / "a"), open_store(tmp_path / "b")
    fill(a, 120)
    fill(b, 120)
    for i in range(120, 200):
        a.append(Entry(i, 2, body(i, 1500)))  # divergent, crosses files
    a.sync()
    a.truncate_suffix(119)
    assert (a.end_index, a.end_term, a.synced_index) == (119, b.end_term, 119)
    for i in range(120, 180):
        e = Entry(i, 3, body(i * 7))
        sb = b.append(e)
        sa = a.append(Entry(e.index, e.term, e.body, pos=sb.pos))
        assert sa.pos == sb.pos
    a.close()
    b.close()
    assert file_bytes(tmp_path / "a") == file_bytes(tmp_path / "b")
    r = open_store(tmp_path / "a")
    assert r.recovery.clean and r.end_index == 179 and r.get(150).term == 3
    r.close()


def test_truncate_to_empty_and_reuse(tmp_path: Path) -> None:
    s = open_store(tmp_path)
    fill(s, 100)
    s.truncate_suffix(-1)
    assert (s.end_index, s.end_term, next_pos(s)) == (-1, -1, 0)
    assert [p.name for p in (tmp_path / "data").iterdir()] == ["0" * 20]
    s.append(Entry(0, 4, b"fresh"))
    s.close()
    s = open_store(tmp_path)
    assert s.end_index == 0 and s.get(0).body == b"fresh" and s.recovery.clean
    s.close()


def test_checkpoint_is_clamped_to_synced(tmp_path: Path) -> None:
    s = open_store(tmp_path)
    fill(s, 10)
    assert s.save_checkpoint(9) == -1  # nothing synced yet
    s.sync()
    fill(s, 5, start=10)
    assert s.save_checkpoint(14) == 9
    assert (tmp_path / "checkpoint").read_text() == "endIndex=9\ncommittedIndex=9\n"
    s.close()
    assert open_store(tmp_path).committed_index == 9


def test_compact_prefix_drops_whole_files(tmp_path: Path) -> None:
    s = open_store(tmp_path, index=4096)
    fill(s, 400)  # > 6 data files, > 3 index files
    pos_150 = s.get(150).pos
    seg_start = pos_150 - pos_150 % KB64
    new_begin = s.compact_prefix(150)
    assert new_begin <= 150 and s.begin_index == new_begin
    assert s.get(new_begin).pos == seg_start
    assert min(int(p.name) for p in (tmp_path / "data").iterdir()) == seg_start
    assert min(int(p.name) for p in (tmp_path / "index").iterdir()) <= new_begin * 32
    with pytest.raises(IndexError):
        s.get(new_begin - 1)
    s.sync()
    s.close()
    s = open_store(tmp_path)
    assert (s.begin_index, s.end_index) == (new_begin, 399), s.recovery.describe()
    assert s.get(399).body == body(399)
    s.append(Entry(400, 9, b"after"))
    s.close()


def test_runtime_corruption_is_not_served(tmp_path: Path) -> None:
    s = FileLogStore(tmp_path, data_file_size=KB64, index_file_size=4096, cache_entries=0)
    fill(s, 20)
    pos = s.get(7).pos
    with open(tmp_path / "data" / ("0" * 20), "r+b") as f:
        f.seek(pos + 60)
        b = f.read(1)
        f.seek(pos + 60)
        f.write(bytes([b[0] ^ 0x10]))
    with pytest.raises(CorruptionError, match=r"entry 7: bodyCrc"):
        s.get(7)
    assert s.get(8).index == 8
    s.close()


def test_bad_parameters(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="index_file_size"):
        FileLogStore(tmp_path, index_file_size=5000)
    with pytest.raises(StoreError, match="data_file_size"):
        FileLogStore(tmp_path, data_file_size=10)
    s = open_store(tmp_path)
    fill(s, 3)
    s.close()
    with pytest.raises(StoreError, match="created with"):
        FileLogStore(tmp_path, data_file_size=8192, index_file_size=4096)


def test_sync_in_another_thread_while_appending(tmp_path: Path) -> None:
    # The server may fsync off the event loop; sync() covers what was appended when it began and
    # never reports entries that a concurrent truncation replaced.
    s = open_store(tmp_path)
    stop = threading.Event()
    errors: list[BaseException] = []
    reported: list[int] = []

    def syncer() -> None:
        try:
            while not stop.is_set():
                reported.append(s.sync())
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    t = threading.Thread(target=syncer)
    t.start()
    try:
        for i in range(1500):
            s.append(Entry(i, 1 + i // 500, body(i, 300)))
            if i % 400 == 399:
                s.truncate_suffix(i - 50)
                for j in range(i - 49, i + 1):
                    s.append(Entry(j, 1 + i // 500, body(j * 3, 300)))
    finally:
        stop.set()
        t.join(timeout=30)
    assert not errors and reported
    assert all(r <= 1499 for r in reported)
    assert s.sync() == 1499
    s.close()
    r = open_store(tmp_path)
    assert r.recovery.clean and r.end_index == 1499
    assert r.get(399 - 49).body == body((399 - 49) * 3, 300)
    r.close()
