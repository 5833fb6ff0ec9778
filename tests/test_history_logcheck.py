"""Log workload checker and Jepsen's set checker on hand-made histories: each anomaly, and clean runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_history_util import Builder

from chaos.history.checkers.logcheck import LogChecker, SetChecker

NODES = ("n1", "n2", "n3")


def _check(tmp_path: Path, b: Builder, checker: Any = None) -> dict[str, Any]:
    path = b.write(tmp_path / "history.jsonl")
    return (checker or LogChecker()).check({"workload": "log"}, path, {})


def _clean() -> tuple[Builder, list[Any]]:
    """Five acknowledged appends at indexes 1..5 (index 0 is a no-op entry), all nodes agree."""
    b = Builder()
    for v in range(5):
        b.append(v % 2, 100 + v, log_index=v + 1)
    return b, [None, 100, 101, 102, 103, 104]


def _reads(b: Builder, log: list[Any], per_node: dict[str, list[Any]] | None = None) -> None:
    for i, n in enumerate(NODES):
        b.read(10 + i, n, (per_node or {}).get(n, log))


def test_clean_log_is_valid(tmp_path: Path) -> None:
    b, log = _clean()
    b.append(2, 200, outcome="info")  # indeterminate: may be present
    b.append(3, 201, outcome="info")  # ... or absent
    b.append(4, 202, outcome="fail")  # definitely failed: absent
    log = [*log, 200]
    _reads(b, log, {"n3": log[:4]})  # a lagging follower holds a prefix
    r = _check(tmp_path, b)
    assert r["valid"] is True, r
    assert (r["attempted"], r["acknowledged"], r["failed"], r["indeterminate"]) == (8, 5, 1, 2)
    assert r["indeterminate_present"] == 1 and r["final_node"] == "n1" and r["final_length"] == 7
    for k in ("lost", "duplicated", "unexpected", "reordered", "divergent"):
        assert r[k] == [] and r[f"{k}_count"] == 0


def test_lost_append(tmp_path: Path) -> None:
    b, log = _clean()
    inv, ok = b.append(0, 105, log_index=6)
    _reads(b, log)
    r = _check(tmp_path, b)
    assert r["valid"] is False
    assert r["lost"] == [
        {
            "value": 105,
            "invoke": inv.index,
            "complete": ok.index,
            "type": "ok",
            "log_index": 6,
            "reason": "acknowledged but missing from the final log",
        }
    ]
    assert r["error"] == "1 lost"


def test_duplicated_entry(tmp_path: Path) -> None:
    b, log = _clean()
    _reads(b, [*log, 102])
    r = _check(tmp_path, b)
    assert r["valid"] is False and r["duplicated_count"] == 1
    d = r["duplicated"][0]
    assert d["value"] == 102 and d["found"] == [3, 6] and d["invoke"] == 4 and d["complete"] == 5


def test_unexpected_never_attempted_and_failed_but_present(tmp_path: Path) -> None:
    b, log = _clean()
    finv, fcmp = b.append(3, 300, outcome="fail")
    _reads(b, [*log, 999, 300])
    r = _check(tmp_path, b)
    assert r["valid"] is False and r["unexpected_count"] == 2
    by_value = {u["value"]: u for u in r["unexpected"]}
    assert by_value[999]["reason"] == "never attempted" and by_value[999]["found"] == [6]
    assert by_value[300]["reason"] == "append definitely failed"
    assert (by_value[300]["invoke"], by_value[300]["complete"], by_value[300]["found"]) == (
        finv.index,
        fcmp.index,
        [7],
    )


def test_reordered_acknowledged_index_differs(tmp_path: Path) -> None:
    b, log = _clean()
    _reads(b, [None, 100, 101, 102, 104, 103])
    r = _check(tmp_path, b)
    assert r["valid"] is False
    reasons = {x["value"]: x["reason"] for x in r["reordered"] if "acknowledged at" in x["reason"]}
    assert reasons == {
        103: "acknowledged at index 4, found at index 5",
        104: "acknowledged at index 5, found at index 4",
    }


def test_reordered_against_real_time(tmp_path: Path) -> None:
    # 100 completed ok before 101 was invoked, yet 101 sits before 100. No log_index reported, so
    # only the real-time order can tell.
    b = Builder()
    a_inv, a_ok = b.append(0, 100)
    b_inv, b_ok = b.append(1, 101)
    _reads(b, [101, 100])
    r = _check(tmp_path, b)
    assert r["valid"] is False and r["reordered_count"] == 1
    x = r["reordered"][0]
    assert x["value"] == 101 and x["invoke"] == b_inv.index and x["found"] == [0]
    assert (
        x["before"]["value"] == 100 and x["before"]["complete"] == a_ok.index and x["before"]["found"] == [1]
    )
    assert "invoked after append 100 completed ok" in x["reason"]


def test_concurrent_appends_may_land_in_either_order(tmp_path: Path) -> None:
    b = Builder()
    b.op("invoke", 0, "append", 100)
    b.op("invoke", 1, "append", 101)
    b.op("ok", 0, "append", 100)
    b.op("ok", 1, "append", 101)
    _reads(b, [101, 100])
    assert _check(tmp_path, b)["valid"] is True


def test_divergent_prefixes_across_nodes(tmp_path: Path) -> None:
    b, log = _clean()
    b.append(0, 105, outcome="info")
    b.append(1, 106, outcome="info")
    _reads(b, [*log, 105], {"n2": [*log, 106], "n3": log})
    r = _check(tmp_path, b)
    assert r["valid"] is False and r["divergent_count"] == 1
    assert r["divergent"] == [{"index": 6, "values": {"n1": 105, "n2": 106}}]


def test_no_final_read_is_unknown(tmp_path: Path) -> None:
    b, _ = _clean()
    b.read(10, "n1", None, outcome="fail")
    r = _check(tmp_path, b)
    assert r["valid"] == "unknown"
    assert r["failed_reads"][0]["node"] == "n1" and "no final read" in r["error"]


def test_anomaly_lists_are_capped_but_counted(tmp_path: Path) -> None:
    b = Builder()
    for v in range(1200):
        b.append(0, v, log_index=v)
    _reads(b, [])
    r = _check(tmp_path, b)
    assert r["lost_count"] == 1200 and len(r["lost"]) == 1000


# ---- set -----------------------------------------------------------------------------------------


def _set_history(final: list[int] | None) -> Builder:
    b = Builder()
    for v in range(4):
        b.op("invoke", v, "add", v)
        b.op("ok", v, "add", v)
    b.op("invoke", 5, "add", 10)
    b.op("info", 5, "add", 10)
    b.op("invoke", 6, "add", 11)
    b.op("fail", 6, "add", 11)
    if final is not None:
        b.op("invoke", 7, "read")
        b.op("ok", 7, "read", final)
    return b


@pytest.mark.parametrize(
    ("final", "valid", "lost", "unexpected", "recovered"),
    [
        ([0, 1, 2, 3], True, [], [], []),
        ([0, 1, 2, 3, 10, 11], True, [], [], [10, 11]),
        ([0, 2, 3], False, [1], [], []),
        ([0, 1, 2, 3, 42], False, [], [42], []),
    ],
    ids=["clean", "recovered", "lost", "unexpected"],
)
def test_set_checker(
    tmp_path: Path, final: list[int], valid: bool, lost: list, unexpected: list, recovered: list
) -> None:
    r = _check(tmp_path, _set_history(final), SetChecker())
    assert r["valid"] is valid
    assert [x["value"] for x in r["lost"]] == lost
    assert [x["value"] for x in r["unexpected"]] == unexpected
    assert [x["value"] for x in r["recovered"]] == recovered
    if lost:
        assert r["lost"][0]["invoke"] == 2 and r["lost"][0]["complete"] == 3


def test_set_never_read_is_unknown(tmp_path: Path) -> None:
    r = _check(tmp_path, _set_history(None), SetChecker())
    assert r["valid"] == "unknown" and r["error"] == "set was never read"


def test_sparse_and_non_int_values(tmp_path: Path) -> None:
    # Small ints index arrays directly; a huge or non-int value switches to a dict mid-history.
    b = Builder()
    b.append(0, 3, log_index=0)
    b.append(1, 10**15, log_index=1)
    b.append(0, -7, log_index=2)
    inv, ok = b.append(1, 4, log_index=3)
    b.append(0, 2, outcome="fail")
    _reads(b, [3, 10**15, -7, 2, 10**16])
    r = _check(tmp_path, b)
    assert r["attempted"] == 5 and r["acknowledged"] == 4
    assert [x["value"] for x in r["lost"]] == [4] and r["lost"][0]["invoke"] == inv.index
    assert {x["value"]: x["reason"] for x in r["unexpected"]} == {
        2: "append definitely failed",
        10**16: "never attempted",
    }
