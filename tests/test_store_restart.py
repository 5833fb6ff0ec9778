"""Restart behaviour of the file store: sparse segments, recovery bounded by the high-water marker,
fallback to whole files when the marker is missing or wrong, batched replay reads, and a server
restart that replays the committed log before it serves."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from store_records import next_pos

from dledger.store import CorruptionError, Entry, StoreError
from dledger.store.file import HIGHWATER_DATA_STEP, HIGHWATER_FILE, FileLogStore

MB = 1024 * 1024


def fill(path: Path, n: int, body: bytes = b"x" * 200, **kw: Any) -> FileLogStore:
    s = FileLogStore(path, **kw)
    for i in range(n):
        s.append(Entry(i, 1 + i // 100, body + str(i).encode()))
    s.sync()
    s.save_checkpoint(n - 1)
    return s


def test_segments_are_sparse_and_recovery_reads_only_up_to_the_mark(tmp_path: Path) -> None:
    s = fill(tmp_path, 2000)
    end_pos = next_pos(s)
    s.close()
    data = tmp_path / "data" / ("0" * 20)
    st = os.stat(data)
    assert st.st_size == 64 * MB and st.st_blocks * 512 < 8 * MB  # not zero-filled
    marks = dict(line.split("=") for line in (tmp_path / HIGHWATER_FILE).read_text().split())
    assert end_pos < int(marks["dataHigh"]) <= end_pos + HIGHWATER_DATA_STEP + 4096
    r = FileLogStore(tmp_path)
    assert r.end_index == 1999 and r.recovery.clean
    assert end_pos <= r.recovery.bytes_read <= end_pos + HIGHWATER_DATA_STEP + 4096
    assert r.get(1999).body.endswith(b"1999")
    r.close()


def test_missing_marker_reads_whole_files_and_writes_it_again(tmp_path: Path) -> None:
    fill(tmp_path, 500).close()
    (tmp_path / HIGHWATER_FILE).unlink()
    r = FileLogStore(tmp_path)
    assert r.end_index == 499 and r.recovery.bytes_read == 64 * MB and r.recovery.clean
    r.close()
    assert (tmp_path / HIGHWATER_FILE).exists()
    r = FileLogStore(tmp_path)
    assert r.recovery.bytes_read <= next_pos(r) + HIGHWATER_DATA_STEP
    r.close()


def test_marker_below_the_data_falls_back_to_whole_files(tmp_path: Path) -> None:
    fill(tmp_path, 500).close()
    (tmp_path / HIGHWATER_FILE).write_text(f"dataHigh={1000:020d}\nindexHigh={64:020d}\n")
    r = FileLogStore(tmp_path)
    assert r.end_index == 499 and r.recovery.cut_reason is None
    assert r.recovery.bytes_read == 64 * MB  # after the bounded read failed: the whole file
    assert r.get(499).body.endswith(b"499")
    r.close()


@pytest.mark.parametrize("data_file_size", [64 * MB, 64 * 1024])
def test_marker_at_a_record_boundary_past_the_checkpoint_keeps_the_durable_records(
    tmp_path: Path, data_file_size: int
) -> None:
    """A marker below the data that ends the bounded read exactly between two records (or at the
    start of a data file), after the entries the checkpoint saw: the records after it were synced,
    perhaps acknowledged. The read must not take the mark for the end of the log (it did: they were
    dropped without a word); it reads the whole files instead."""
    s = fill(tmp_path, 300, data_file_size=data_file_size)  # checkpoint: entries up to 299
    for i in range(300, 400):
        s.append(Entry(i, 4, b"y" * 200))
    s.sync()  # durable, not checkpointed
    mark = s.get(350).pos  # the record boundary before entry 350
    s.close()
    (tmp_path / HIGHWATER_FILE).write_text(f"dataHigh={mark:020d}\nindexHigh={64:020d}\n")
    r = FileLogStore(tmp_path, data_file_size=data_file_size)
    assert r.end_index == 399 and r.get(399).body == b"y" * 200 and r.recovery.cut_reason is None
    r.close()


def test_garbage_past_the_end_inside_the_mark_is_cut(tmp_path: Path) -> None:
    s = fill(tmp_path, 300)
    end_pos = next_pos(s)
    s.close()
    with open(tmp_path / "data" / ("0" * 20), "r+b") as f:
        f.seek(end_pos + 100_000)  # a page of a later record reached the disk, its header did not
        f.write(b"\x07" * 4096)
    r = FileLogStore(tmp_path)
    assert r.end_index == 299 and "torn write" in (r.recovery.cut_reason or "")
    r.close()
    with open(tmp_path / "data" / ("0" * 20), "rb") as f:
        f.seek(end_pos)
        assert not any(f.read(200_000))


def test_get_range_matches_get_and_names_damage(tmp_path: Path) -> None:
    s = fill(tmp_path, 700, data_file_size=64 * 1024, index_file_size=64 * 1024, cache_entries=0)
    got = s.get_range(0, 699)  # spans several data files
    assert [e.body for e in got] == [s.get(i).body for i in range(700)]
    assert [(e.index, e.term, e.pos) for e in got] == [(i, s.get(i).term, s.get(i).pos) for i in range(700)]
    assert s.get_range(5, 4) == []
    with pytest.raises(IndexError):
        s.get_range(0, 700)
    pos = s.get(10).pos
    s.close()
    seg = tmp_path / "data" / ("0" * 20)
    with open(seg, "r+b") as f:
        f.seek(pos + 60)
        b = f.read(1)
        f.seek(pos + 60)
        f.write(bytes([b[0] ^ 1]))
    r = FileLogStore(
        tmp_path, data_file_size=64 * 1024, index_file_size=64 * 1024, verify_files=1, cache_entries=0
    )
    assert r.recovery.trusted_files > 0  # the damaged file was not scanned on open
    with pytest.raises(CorruptionError, match="bodyCrc"):
        r.get_range(0, 20)
    r.close()


def test_verify_from_the_committed_entry_on(tmp_path: Path) -> None:
    kw: dict[str, Any] = {"data_file_size": 64 * 1024, "index_file_size": 64 * 1024}
    s = fill(tmp_path, 1500, **kw)  # ~6 data files
    s.close()
    # A lower committed index (a checkpoint from before the last writes) is verified from its file.
    (tmp_path / "checkpoint").write_text("endIndex=1499\ncommittedIndex=100\n")
    r = FileLogStore(tmp_path, verify_files=1, **kw)
    assert r.recovery.trusted_files == 0 and r.recovery.entries_checked == 1500
    r.close()
    (tmp_path / "checkpoint").write_text("endIndex=1499\ncommittedIndex=1400\n")
    r = FileLogStore(tmp_path, verify_files=1, **kw)
    assert r.recovery.trusted_files > 0 and r.recovery.entries_checked < 1500 and r.end_index == 1499
    r.close()


def test_server_restart_replays_the_committed_log_before_serving(tmp_path: Path) -> None:
    from dledger.client import DLedgerClient

    port = 26000 + os.getpid() % 3000
    peers = f"n0-127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "dledger.cli", "server", "--id", "n0", "--peers", peers]
    cmd += ["--store-dir", str(tmp_path / "store")]
    log = tmp_path / "n0.log"

    def start() -> subprocess.Popen[bytes]:
        with open(log, "ab") as f:
            return subprocess.Popen(cmd, stdout=f, stderr=f)

    p = start()
    try:
        with DLedgerClient(peers, timeout=2.0) as c:
            deadline = time.monotonic() + 30
            while not c.kv_put("k0", 0).ok:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
            for i in range(1, 300):
                assert c.kv_put(f"k{i % 7}", i).ok
        time.sleep(1.2)  # a checkpoint with the committed index
        p.kill()
        p.wait(10)
        p = start()
        with DLedgerClient(peers, timeout=2.0) as c:
            deadline = time.monotonic() + 30
            while True:
                r = c.kv_get("k6", read_mode="unsafe")  # local state, no log entry
                if r.ok:
                    break
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.02)
            # the first answer already has the replayed state
            assert r.value == 293
        text = log.read_text()
        assert "replayed entries [0, " in text
    finally:
        p.kill()
        p.wait(10)


def test_reset_restarts_the_log_like_the_leader_has_it(tmp_path: Path) -> None:
    from dledger.tools.inspect import inspect_store

    kw: dict[str, Any] = {"data_file_size": 64 * 1024, "index_file_size": 64 * 1024}
    leader = fill(tmp_path / "leader", 800, **kw)
    follower = fill(tmp_path / "follower", 50, **kw)  # far behind, then the leader compacted
    s_index = 600
    nxt = leader.get(s_index + 1)
    follower.reset(s_index + 1, nxt.pos, leader.term_at(s_index), leader.chain_at(s_index))
    assert (follower.begin_index, follower.end_index, next_pos(follower)) == (601, 600, nxt.pos)
    with pytest.raises(StoreError):
        follower.append(Entry(601, 7, b"x", pos=nxt.pos + 1))  # replicas must agree on pos
    for i in range(601, 800):
        e = leader.get(i)
        assert follower.append(Entry(i, e.term, e.body, e.magic, e.pos)).pos == e.pos
    follower.sync()
    follower.save_checkpoint(799)
    leader.close()
    follower.close(sync=True)
    name = f"{nxt.pos - nxt.pos % (64 * 1024):020d}"
    lf = (tmp_path / "leader" / "data" / name).read_bytes()
    ff = (tmp_path / "follower" / "data" / name).read_bytes()
    gap = nxt.pos % (64 * 1024)
    assert gap > 0 and ff[gap:] == lf[gap:]  # chainCrc seeded with the leader's: same bytes
    ins = inspect_store(tmp_path / "follower", 64 * 1024)
    assert not ins.problems and (ins.begin_index, ins.end_index) == (601, 799)
    r = FileLogStore(tmp_path / "follower", verify_files=1, **kw)
    assert (r.begin_index, r.end_index) == (601, 799) and r.recovery.cut_reason is None
    assert r.get(601).body == nxt.body
    r.truncate_suffix(600)  # everything after the snapshot: back to the empty restarted log
    assert (r.begin_index, r.end_index, next_pos(r)) == (601, 600, nxt.pos)
    r.close()


def test_marker_at_a_record_boundary_below_synced_data_falls_back(tmp_path: Path) -> None:
    s = fill(tmp_path, 500)
    boundary = s.get(200).pos  # a record boundary: the bounded read would see a clean end there
    s.close()
    (tmp_path / HIGHWATER_FILE).write_text(f"dataHigh={boundary:020d}\nindexHigh={64:020d}\n")
    r = FileLogStore(tmp_path)
    assert r.end_index == 499 and r.recovery.bytes_read == 64 * MB
    r.close()
