"""dledger.tools.inspect: read-only verification and the offline file-fault commands."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dledger.store import CorruptionError, Entry
from dledger.store.file import FileLogStore

KB64 = 64 * 1024


def make(path: Path, n: int) -> FileLogStore:
    s = FileLogStore(path, data_file_size=KB64, index_file_size=4096)
    for i in range(n):
        s.append(Entry(i, 1 + i // 100, bytes([65 + i % 26]) * 900))
    return s


def run_inspect(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dledger.tools.inspect", *args], capture_output=True, text=True, timeout=60
    )


def test_cli_reports_range_and_verifies(tmp_path: Path) -> None:
    s = make(tmp_path, 250)
    s.sync()
    s.save_checkpoint(200)
    s.close()
    r = run_inspect(str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "entries    [0, 249]" in r.stdout and "verify     OK" in r.stdout
    j = json.loads(run_inspect(str(tmp_path), "--json").stdout)
    assert (j["end_index"], j["ok"], j["checkpoint"]["committedIndex"]) == (249, True, "200")
    # Flip a body bit: the inspector names file, offset and entry, exits 1, changes nothing.
    p = tmp_path / "data" / f"{KB64:020d}"
    before = p.read_bytes()
    with open(p, "r+b") as f:
        f.seek(500)
        f.write(b"\xff")
    r = run_inspect(str(tmp_path))
    assert r.returncode == 1 and "FAILED" in r.stdout and str(p) in r.stdout and "bodyCrc" in r.stdout
    assert p.read_bytes()[:500] == before[:500]
    assert run_inspect(str(tmp_path / "nope")).returncode == 254


def test_the_server_cli_runs_it_as_dledger_inspect(tmp_path: Path) -> None:
    s = make(tmp_path, 10)
    s.sync()
    s.close()
    r = subprocess.run(
        [sys.executable, "-m", "dledger.cli", "inspect", str(tmp_path), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["end_index"] == 9
    usage = subprocess.run(
        [sys.executable, "-m", "dledger.cli", "inspect", "--help"], capture_output=True, text=True, timeout=60
    )
    assert usage.returncode == 0 and usage.stdout.startswith("usage: dledger inspect")


def test_fault_commands_then_recovery(tmp_path: Path) -> None:
    s = make(tmp_path, 120)
    s.sync()
    s.save_checkpoint(60)
    last = s.get(119)
    s.close()
    # Torn write: recovery cuts exactly the torn entry.
    r = run_inspect(str(tmp_path), "--truncate-tail", "100")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["cut_bytes"] == 100
    st = FileLogStore(tmp_path, data_file_size=KB64, index_file_size=4096)
    assert st.end_index == 118 and st.recovery.cut_reason
    st.close()
    # Bit flip in the committed prefix: the node refuses to start.
    victim = FileLogStore(tmp_path, data_file_size=KB64, index_file_size=4096).get(30)
    r = run_inspect(str(tmp_path), "--flip-bit", str(victim.pos + 60), "--bit", "3")
    assert r.returncode == 0 and json.loads(r.stdout)["pos"] == victim.pos + 60
    assert run_inspect(str(tmp_path)).returncode == 1
    with pytest.raises(CorruptionError, match="entry 30"):
        FileLogStore(tmp_path, data_file_size=KB64, index_file_size=4096)
    assert run_inspect(str(tmp_path), "--flip-bit", "-5").returncode == 254
    assert last.index == 119
