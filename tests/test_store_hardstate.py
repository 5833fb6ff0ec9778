"""currterm and checkpoint files: DLedger's properties text, atomic durable writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from dledger.store import StoreError
from dledger.store.hardstate import Checkpoint, HardState, TermVote, parse_properties


def test_currterm_round_trip_in_dledger_format(tmp_path: Path) -> None:
    hs = HardState(tmp_path)
    assert hs.load() == TermVote(0, None)
    hs.save(5, "n2")
    assert (tmp_path / "currterm").read_text() == "currTerm=5\nvoteLeader=n2\n"
    assert not (tmp_path / "currterm.tmp").exists()
    assert HardState(tmp_path).load() == TermVote(5, "n2")
    hs.save(6, None)
    assert HardState(tmp_path).load() == TermVote(6, None)


def test_reads_java_properties_written_by_dledger(tmp_path: Path) -> None:
    (tmp_path / "currterm").write_text("#Sat Nov 21 10:00:00 CST 2026\ncurrTerm=12\nvoteLeader=\n")
    assert HardState(tmp_path).load() == TermVote(12, None)


def test_bad_content_names_file_and_key(tmp_path: Path) -> None:
    (tmp_path / "currterm").write_text("currTerm=abc\n")
    with pytest.raises(StoreError, match=r"currterm: currTerm='abc', expected an integer"):
        HardState(tmp_path).load()
    with pytest.raises(StoreError, match="expected key=value"):
        parse_properties("garbage", "f")
    with pytest.raises(ValueError, match="curr_term"):
        HardState(tmp_path).save(-1, None)


def test_a_stale_tmp_file_does_not_matter(tmp_path: Path) -> None:
    hs = HardState(tmp_path)
    hs.save(3, "n1")
    (tmp_path / "currterm.tmp").write_text("currTerm=99\n")  # crash mid-write
    assert HardState(tmp_path).load() == TermVote(3, "n1")
    hs2 = HardState(tmp_path)
    hs2.load()
    hs2.save(4, "n1")
    assert HardState(tmp_path).load() == TermVote(4, "n1")


def test_checkpoint_round_trip(tmp_path: Path) -> None:
    ck = Checkpoint(tmp_path)
    assert ck.load().committed_index == -1
    ck.save(10, 7)
    assert (tmp_path / "checkpoint").read_text() == "endIndex=10\ncommittedIndex=7\n"
    got = Checkpoint(tmp_path).load()
    assert (got.end_index, got.committed_index) == (10, 7)
