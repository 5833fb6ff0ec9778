"""The truncate and bitflip faults' node-side script run against a real
``dledger.store.file.FileLogStore`` directory on this machine (the same python3 code the nemesis
ships to a node), then the store reopened: what the store recovers is the outcome asserted.
lose-unfsynced needs its FUSE layer on a node: tests/test_nemesis_lazyfs.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from chaos.nemesis.files import REMOTE
from dledger.store import CorruptionError, Entry
from dledger.store.file import FileLogStore

SIZE = 64 * 1024


def run_fault(root: Path, fault: str, **params: Any) -> dict[str, Any]:
    job = {"fault": fault, "data_dir": str(root), "seed": 3, "bytes": 64, "count": 1, "region": "tail"}
    job["data_files"] = ["data/*"]  # the store's segments, as DLedgerDB.data_files names them under its id
    job.setdefault("tail_bytes", 4096)
    job.update(params)
    res = subprocess.run([sys.executable, "-c", REMOTE, json.dumps(job)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    out: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    return out


def fill(root: Path, synced: int, unsynced: int) -> None:
    s = FileLogStore(root, data_file_size=SIZE, index_file_size=4096)
    for i in range(synced + unsynced):
        s.append(Entry(i, 1, f"entry-{i:05d}".encode() * 4))
        if i == synced - 1:
            s.sync()
    s.close(sync=False)  # what a SIGKILL leaves: the tail is in the page cache, not fsynced


def reopen(root: Path) -> FileLogStore:
    return FileLogStore(root, data_file_size=SIZE, index_file_size=4096)


def test_truncate_tears_the_last_record(tmp_path: Path) -> None:
    fill(tmp_path, synced=30, unsynced=0)
    out = run_fault(tmp_path, "truncate", bytes=10)
    (change,) = out["changes"]
    assert Path(change["file"]).parent.name == "data"
    assert change["mode"] == "zero" and change["to"] - change["from"] == 10
    s = reopen(tmp_path)  # nothing committed per the checkpoint: the torn tail is cut
    assert s.end_index == 28


def test_bitflip_anywhere_inside_committed_prefix_is_refused(tmp_path: Path) -> None:
    s = FileLogStore(tmp_path, data_file_size=SIZE, index_file_size=4096)
    for i in range(30):
        s.append(Entry(i, 1, f"entry-{i:05d}".encode() * 4))
    s.sync()
    assert s.save_checkpoint(29) == 29
    s.close()
    out = run_fault(tmp_path, "bitflip", region="anywhere", count=5)
    (change,) = out["changes"]
    assert change["mode"] == "bitflip" and len(change["flips"]) == 5
    try:
        recovered = reopen(tmp_path)
    except CorruptionError as e:
        assert "data" in str(e) or "corrupt" in str(e).lower()
    else:
        # not refused: recovery must then have cut the log before the first flipped byte
        first = min(off for off, _ in change["flips"])
        assert recovered.end_index < 29
        assert all(
            recovered.get(i).pos + recovered.get(i).size <= first for i in range(recovered.end_index + 1)
        )


@pytest.mark.parametrize("fault", ["truncate", "bitflip"])
def test_empty_store_is_left_alone(tmp_path: Path, fault: str) -> None:
    out = run_fault(tmp_path, fault)
    assert out["changes"] == []


def test_only_the_files_the_db_declares_are_damaged(tmp_path: Path) -> None:
    """The DB's ``data_files`` globs (relative to its data dir) pick the files: the newest segment
    (numeric name) of the declared ones, never a state file next to them, however recent."""
    seg_dir = tmp_path / "node-1" / "seg"
    seg_dir.mkdir(parents=True)
    for name in ("00000000000000000000", "00000000000000004096"):
        (seg_dir / name).write_bytes(b"x" * 512)
    state = tmp_path / "node-1" / "vote"
    state.write_bytes(b"term 7\n")
    out = run_fault(tmp_path, "truncate", bytes=10, data_files=["*/seg/*"])
    (change,) = out["changes"]
    assert change["file"] == str(seg_dir / "00000000000000004096") and change["to"] == 512
    assert state.read_bytes() == b"term 7\n"
    out = run_fault(tmp_path, "truncate", bytes=3, data_files=["*/vote"])
    assert [c["file"] for c in out["changes"]] == [str(state)] and state.read_bytes() == b"term"
