"""The log-reads checker (Jepsen's set-full for the log workload) on hand-made histories: reads
during the run, final reads, each anomaly, stale reads that are not anomalies, and clean runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from test_history_util import Builder

from chaos.history.checkers.logcheck import LogReadsChecker
from chaos.history.checkers.registry import checkers_for

NODES = ("n1", "n2", "n3")


def _range(b: Builder, p: int, node: str, start: int, values: list[Any], to_end: bool = True) -> None:
    b.op("invoke", p, "read-range", None, node=node)
    b.op("ok", p, "read-range", values, node=node, from_index=start, to_end=to_end, commit_index=start + 3)


def _final(b: Builder, log: list[Any]) -> None:
    for i, n in enumerate(NODES):
        b.read(20 + i, n, log)


def _check(tmp_path: Path, b: Builder) -> dict[str, Any]:
    return LogReadsChecker().check({"workload": "log"}, b.write(tmp_path / "history.jsonl"), {})


def _clean() -> tuple[Builder, list[Any]]:
    """Appends 100..104 acknowledged at indexes 1..5 (index 0 a no-op), with reads in between."""
    b = Builder()
    for v in range(5):
        b.append(v % 2, 100 + v, log_index=v + 1)
        _range(b, 5, "n2", 0, [None, *range(100, 101 + v)])
    return b, [None, 100, 101, 102, 103, 104]


def test_clean_history_is_valid(tmp_path: Path) -> None:
    b, log = _clean()
    _final(b, log)
    r = _check(tmp_path, b)
    assert r["valid"] is True, r
    assert (r["reads"], r["final_reads"], r["known_count"], r["ok_count"]) == (8, 3, 5, 5)
    for k in ("lost", "divergent", "unexpected", "duplicated"):
        assert r[k] == [] and r[f"{k}_count"] == 0
    assert r["never_read_count"] == 0 and r["stale_count"] == 0


def test_lagging_follower_is_stale_not_invalid(tmp_path: Path) -> None:
    b, log = _clean()
    b.at(1.0)
    _range(b, 6, "n3", 0, [None, 100, 101])  # n3's commitIndex is 2: 102..104 not there yet
    b.at(1.5)
    _final(b, log)
    r = _check(tmp_path, b)
    assert r["valid"] is True, r
    assert r["stale_count"] == 3
    worst = r["worst_stale"][0]
    assert worst["value"] == 102 and worst["stable_latency_ms"] > 900
    assert r["stable_latency_ms"]["1.0"] > 900 and r["stable_latency_ms"]["0.0"] == 0.0


def test_a_read_cut_short_by_an_error_is_not_absence(tmp_path: Path) -> None:
    b, log = _clean()
    b.at(1.0)
    _range(b, 6, "n3", 0, [None, 100], to_end=False)
    _final(b, log)
    r = _check(tmp_path, b)
    assert r["valid"] is True and r["stale_count"] == 0, r


def test_dirty_read_then_truncated_is_divergent_and_lost(tmp_path: Path) -> None:
    b, log = _clean()
    b.op("invoke", 7, "append", 200)  # never completes: a deposed leader's uncommitted entry
    _range(b, 8, "n1", 4, [103, 104, 200])  # n1 served index 6 before it was committed
    b.append(1, 105, log_index=6)  # the new leader put another entry at index 6
    _final(b, [*log, 105])
    r = _check(tmp_path, b)
    assert r["valid"] is False
    assert r["divergent_count"] == 1 and r["divergent"][0]["index"] == 6
    assert r["divergent"][0]["first"]["value"] == 200 and r["divergent"][0]["later"]["value"] == 105
    assert r["lost_count"] == 1 and r["lost"][0]["value"] == 200
    assert "another entry at its index" in r["lost"][0]["reason"]
    assert "divergent" in r["error"] and "lost" in r["error"]


def test_seen_then_missing_from_final_log_is_lost(tmp_path: Path) -> None:
    b, log = _clean()
    b.op("invoke", 7, "append", 300)
    _range(b, 8, "n1", 5, [104, 300])
    _final(b, log)  # nobody has index 6 after healing
    r = _check(tmp_path, b)
    assert r["valid"] is False and r["lost_count"] == 1, r
    assert r["lost"][0]["value"] == 300 and "missing from the final log" in r["lost"][0]["reason"]
    assert r["divergent_count"] == 0


def test_value_no_client_wrote_is_unexpected(tmp_path: Path) -> None:
    b, log = _clean()
    b.append(3, 400, outcome="fail")
    _range(b, 8, "n2", 4, [103, 104, 999])
    _final(b, [*log, 999])
    r = _check(tmp_path, b)
    assert r["valid"] is False and r["unexpected_count"] == 1, r
    assert (
        r["unexpected"][0]["value"] == 999 and r["unexpected"][0]["reason"] == "never written by any client"
    )
    b2, log2 = _clean()
    b2.append(3, 400, outcome="fail")
    _final(b2, [*log2, 400])
    r2 = _check(tmp_path, b2)
    assert r2["unexpected"][0]["reason"] == "append definitely failed"


def test_one_value_at_two_indices_is_duplicated(tmp_path: Path) -> None:
    b, log = _clean()
    _range(b, 8, "n2", 5, [104, 104])
    _final(b, [*log, 104])
    r = _check(tmp_path, b)
    assert r["valid"] is False and r["duplicated_count"] == 1, r
    assert r["duplicated"][0] == {**r["duplicated"][0], "value": 104, "indices": [5, 6]}


def test_acknowledged_index_contradicted_by_a_read(tmp_path: Path) -> None:
    b, log = _clean()
    _final(b, [None, 100, 101, 103, 102, 104])  # 102 was acknowledged at index 3
    r = _check(tmp_path, b)
    assert r["valid"] is False and r["divergent_count"] >= 1, r
    first = r["divergent"][0]
    assert first["first"]["kind"] == "ack" and first["later"]["kind"] == "read"


def test_unknown_without_reads_or_final_reads(tmp_path: Path) -> None:
    b = Builder()
    b.append(0, 1, log_index=1)
    r = _check(tmp_path, b)
    assert r["valid"] == "unknown" and "no read" in r["error"]
    _range(b, 5, "n1", 0, [None, 1])
    r = _check(tmp_path, b)
    assert r["valid"] == "unknown" and "no final read" in r["error"]


def test_log_workload_checks_reads_by_default() -> None:
    assert "log-reads" in checkers_for({"workload": "log"})
    assert isinstance(checkers_for({"checkers": ["log-reads"]})["log-reads"], LogReadsChecker)


def test_read_before_a_definitely_failed_append_completes_is_unexpected(tmp_path: Path) -> None:
    b, log = _clean()
    b.op("invoke", 7, "append", 500)
    _range(b, 8, "n2", 5, [104, 500])
    b.op("fail", 7, "append", 500, error="NOT_LEADER")
    _final(b, [*log, 500])
    r = _check(tmp_path, b)
    assert r["valid"] is False and r["unexpected_count"] == 1, r
    assert r["unexpected"][0]["reason"] == "append definitely failed" and r["lost_count"] == 0
