"""Elle checker: hand-made histories of every anomaly type, and Elle's published example cases
(jepsen-io/elle ``test/elle/list_append_test.clj`` and ``rw_register_test.clj``), written again in
our format. Each case asserts the verdict per consistency model and the anomaly named."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from chaos.history.checkers.elle import ElleChecker, check_file, check_ops
from chaos.history.op import Op
from chaos.history.store import write_history


def mops(spec: str) -> list[list[Any]]:
    """``"ax1 ry12 rz"``: append 1 to x, read y = [1 2], read z = empty (list-append);
    ``"wx1 ry1 rz_"``: write x = 1, read y = 1, read z = nil (rw-register)."""
    out: list[list[Any]] = []
    for tok in spec.split():
        m = re.fullmatch(r"([arw])([a-z])(_|\d*)", tok)
        assert m, tok
        f, k, v = m.groups()
        if f == "a":
            out.append(["append", k, int(v)])
        elif f == "w":
            out.append(["w", k, int(v)])
        elif v == "_":
            out.append(["r", k, None])
        elif "_" in spec or any(t.startswith("w") for t in spec.split()):
            out.append(["r", k, int(v)])
        else:
            out.append(["r", k, [int(c) for c in v] if v else None])
    return out


class H:
    """A history under construction: ``txn`` runs one transaction start to end; ``invoke`` and
    ``complete`` interleave them."""

    def __init__(self, register: bool = False) -> None:
        self.ops: list[Op] = []
        self.register = register

    def _mops(self, spec: str) -> list[list[Any]]:
        ms = mops(spec)
        if self.register:
            ms = [
                [f, k, v if not (f == "r" and isinstance(v, list)) else (v[0] if v else None)]
                for f, k, v in ms
            ]
        return ms

    def invoke(self, p: int, spec: str) -> H:
        inv = [[f, k, None] if f == "r" else [f, k, v] for f, k, v in self._mops(spec)]
        self.ops.append(Op("invoke", p, "txn", inv, time=len(self.ops), index=len(self.ops)))
        return self

    def complete(self, p: int, spec: str, type_: str = "ok") -> H:
        self.ops.append(Op(type_, p, "txn", self._mops(spec), time=len(self.ops), index=len(self.ops)))
        return self

    def txn(self, spec: str, p: int | None = None, type_: str = "ok") -> H:
        p = len(self.ops) if p is None else p
        return self.invoke(p, spec).complete(p, spec, type_)


def check(h: H, model: str, workload: str = "list-append", **kw: Any) -> dict[str, Any]:
    return check_ops(h.ops, "rw-register" if h.register else workload, model, **kw)


def verdicts(h: H, expected: dict[str, Any], **kw: Any) -> dict[str, dict[str, Any]]:
    out = {}
    for model, want in expected.items():
        r = check(h, model, **kw)
        assert r["valid"] == want, (model, r["summary"])
        out[model] = r
    return out


ALL = (
    "read-uncommitted",
    "read-committed",
    "repeatable-read",
    "snapshot-isolation",
    "serializable",
    "strict-serializable",
)


def test_valid_serial_history_is_valid_under_every_model():
    h = H().txn("ax1 ry").txn("rx1 ay1").txn("rx1 ry1 ax2").txn("rx12")
    for m in ALL:
        r = check(h, m)
        assert r["valid"] is True, (m, r["summary"])
        assert r["anomaly_types"] == [] and r["not"] == []


def test_g0_write_cycle():
    # list_append_test checker-test "G0": x orders T1 before T2, y orders T2 before T1
    h = H().txn("ax1 ay1").txn("ax2 ay2").txn("rx12 ry21")
    rs = verdicts(h, {m: False for m in ALL})
    r = rs["read-uncommitted"]
    assert r["anomaly_types"] == ["G0"] and r["not"] == ["read-uncommitted"]
    case = r["anomalies"]["G0"][0]
    assert [e["type"] for e in case["edges"]] == ["ww", "ww"]
    assert "appended" in case["edges"][0]["why"] and case["cycle"][0]["name"] == "T1"


def test_g1a_aborted_read():
    # checker-test "G1a": read-uncommitted cannot decide (no edge), read-committed sees G1a
    h = H().txn("ax1", type_="fail").txn("rx1")
    r = check(h, "read-uncommitted")
    assert r["valid"] == "unknown" and r["anomaly_types"] == ["G1a", "empty-transaction-graph"]
    assert "empty transaction graph" in r["cause"] and r["not"] == ["read-committed"]
    for m in ALL[1:]:
        r = check(h, m)
        assert r["valid"] is False and "G1a" in r["anomaly_types"]
    case = r["anomalies"]["G1a"][0]
    assert case["element"] == 1 and case["mop"] == ["r", "x", [1]] and case["writer_fail"]["type"] == "fail"
    assert "failed" in case["explanation"]


def test_g1b_intermediate_read_is_also_g_single():
    # checker-test "G1b": strict-serializable reports G-single-item and G1b
    h = H().txn("ax1 ax2").txn("rx1")
    assert check(h, "strict-serializable")["anomaly_types"] == ["G-single-item", "G1b"]
    r = check(h, "read-committed")
    assert r["valid"] is False and r["anomaly_types"] == ["G1b"] and r["not"] == ["read-committed"]
    assert check(h, "read-uncommitted")["valid"] is True


def test_g1c_circular_information_flow():
    # README demo / checker-test "G1c"
    h = H().txn("ax1 ry1").txn("ax2 ay1").txn("rx12")
    rs = verdicts(h, {"read-uncommitted": True, "read-committed": False, "serializable": False})
    r = rs["read-committed"]
    assert r["anomaly_types"] == ["G1c"] and r["not"] == ["read-committed"]
    assert {e["type"] for e in r["anomalies"]["G1c"][0]["edges"]} == {"ww", "wr"}


def test_g_single_item_read_skew():
    # checker-test "G-single": T2 read y empty though T1 (which T2 follows on x) appended to y
    h = H().txn("ax1 ay1").txn("ax2 ry").txn("rx12")
    rs = verdicts(
        h,
        {
            "read-committed": True,
            "repeatable-read": False,
            "snapshot-isolation": False,
            "serializable": False,
        },
    )
    r = rs["serializable"]
    assert r["anomaly_types"] == ["G-single-item"] and r["not"] == ["consistent-view", "repeatable-read"]
    whys = [e["why"] for e in r["anomalies"]["G-single-item"][0]["edges"]]
    assert any("without 1" in w and "-rw->" in w for w in whys), whys


def test_g2_item_write_skew():
    # checker-test "G2" / repeatable-read-test: two reads of the initial state, crossed appends
    h = H().txn("ax1 ry").txn("ay1 rx")
    rs = verdicts(
        h,
        {
            "read-committed": True,
            "snapshot-isolation": True,
            "repeatable-read": False,
            "serializable": False,
            "strict-serializable": False,
        },
    )
    r = rs["serializable"]
    assert r["anomaly_types"] == ["G2-item"] and r["not"] == ["repeatable-read"]
    assert [e["type"] for e in r["anomalies"]["G2-item"][0]["edges"]] == ["rw", "rw"]


def test_g_nonadjacent_item_long_fork():
    # G-nonadjacent-test
    h = H().txn("ax1").txn("rx1 ry").txn("ay1").txn("ry1 rx")
    rs = verdicts(
        h,
        {
            "read-committed": True,
            "snapshot-isolation": False,
            "repeatable-read": False,
            "strict-serializable": False,
        },
    )
    r = rs["strict-serializable"]
    assert r["anomaly_types"] == ["G-nonadjacent-item"]
    assert r["not"] == ["repeatable-read", "snapshot-isolation"]
    assert [e["type"] for e in r["anomalies"]["G-nonadjacent-item"][0]["edges"]] == ["rw", "wr", "rw", "wr"]


def test_adjacent_rw_edges_are_not_g_nonadjacent():
    # G-nonadjacent-test, second part: rw rw wr rw wr is fine under snapshot isolation
    h = H().txn("rx5 ay1").txn("ry az2").txn("rz at3").txn("rt3 au4").txn("ru ax5")
    assert check(h, "snapshot-isolation")["valid"] is True
    assert check(h, "serializable")["valid"] is True


def test_rr_g_single_item_and_g_nonadjacent_item():
    # rr-g-single-item-test and rr-g-nonadjacent-item-test
    h = H().txn("ax1 ay1").txn("rx1 ry")
    r = check(h, "repeatable-read")
    assert r["anomaly_types"] == ["G-single-item"] and r["not"] == ["consistent-view", "repeatable-read"]
    h = H().txn("ax1 at1").txn("rx1 ry").txn("ay1 az2").txn("rz2 rt")
    r = check(h, "repeatable-read")
    assert r["anomaly_types"] == ["G-nonadjacent-item"] and r["not"] == [
        "repeatable-read",
        "snapshot-isolation",
    ]


def test_g_single_item_realtime():
    # checker-test "Strong SI violation": T3 reads [1] after T2 appended 2 and completed
    h = H().txn("ax1", 0).txn("ax2", 1).txn("rx1", 2).txn("rx12", 3)
    assert check(h, "serializable")["valid"] is True
    r = check(h, "strict-serializable")
    assert r["valid"] is False and r["anomaly_types"] == ["G-single-item-realtime"]
    assert r["not"] == ["strong-snapshot-isolation"]
    edges = r["anomalies"]["G-single-item-realtime"][0]["edges"]
    assert [e["type"] for e in edges] == ["realtime", "rw"]
    assert "completed (op 3) before" in edges[0]["why"]


def test_g_single_item_process():
    # checker-test "Strong Session SI violation"
    h = H().txn("ax1", 0).txn("ax2", 1).txn("rx1", 1).txn("rx12", 2)
    assert check(h, "serializable")["valid"] is True
    r = check(h, "strong-session-snapshot-isolation")
    assert r["anomaly_types"] == ["G-single-item-process"] and r["not"] == [
        "strong-session-snapshot-isolation"
    ]
    assert "process 1 ran" in r["anomalies"]["G-single-item-process"][0]["edges"][0]["why"]


def test_g_nonadjacent_item_process():
    # checker-test "G-nonadjacent-process" (elle issue 17)
    # T0 reads z = [1] (appended by T3) and x empty; it completes last
    h = H().invoke(0, "rx rz").txn("ax1", 1).txn("rz", 1).txn("az1", 2).complete(0, "rx rz1")
    assert check(h, "serializable")["valid"] is True
    r = check(h, "strong-session-snapshot-isolation")
    assert r["anomaly_types"] == ["G-nonadjacent-item-process"]


def test_g1c_process():
    # wr-process-test (elle issue 21): t0 -wr-> t1 -process-> t2 -wr-> t0
    h = H().invoke(1, "rx ay1").complete(1, "rx1 ay1").txn("ry1", 2).txn("ax1", 2)
    r = check(h, "strong-session-snapshot-isolation")
    assert r["anomaly_types"] == ["G1c-process"] and r["not"] == ["strong-session-read-committed"]
    assert check(h, "serializable")["valid"] is True


@pytest.mark.parametrize(
    ("kind", "build"),
    [
        # ww + process: T2 appends x after T1 on one process, a read shows x = [2 1]
        ("G0-process", lambda: H().txn("ax1", 0).txn("ax2", 0).txn("rx21", 1)),
        # wr + process: T1 reads y = [1] before the same process appends it
        ("G1c-process", lambda: H().invoke(0, "ry").complete(0, "ry1").txn("ay1", 0)),
        # rw rw adjacent + process
        ("G2-item-process", lambda: H().txn("ay1", 0).txn("rx", 0).txn("ax1 ry", 1)),
    ],
)
def test_process_variants(kind, build):
    h = build()
    assert check(h, "serializable")["valid"] is True
    r = check(h, "strong-session-serializable")
    assert r["valid"] is False and r["anomaly_types"] == [kind], r["summary"]


def test_realtime_variants():
    # G0-realtime: T1 completes before T2 starts, yet x's order puts T2 first
    h = H().txn("ax1", 0).txn("ax2", 1).txn("rx21", 2)
    assert check(h, "serializable")["valid"] is True
    assert check(h, "strict-serializable")["anomaly_types"] == ["G0-realtime"]
    # G1c-realtime: T1 reads y = [1], appended by T2 which starts after T1 completed
    h = H().invoke(0, "ry").complete(0, "ry1").txn("ay1", 1)
    assert check(h, "strict-serializable")["anomaly_types"] == ["G1c-realtime"]
    # G-nonadjacent-item-realtime: T4 -rw-> T1 -wr-> T2 -rw-> T3 -realtime-> T4
    h = (
        H()
        .invoke(1, "ax1")
        .invoke(2, "rx ry")
        .invoke(3, "ay1")
        .complete(3, "ay1")
        .invoke(4, "rx")
        .complete(1, "ax1")
        .complete(2, "rx1 ry")
        .complete(4, "rx")
    )
    assert check(h, "serializable")["valid"] is True
    r = check(h, "strict-serializable")
    assert r["anomaly_types"] == ["G-nonadjacent-item-realtime"], r["summary"]
    # G2-item-realtime: T1 -rw-> T2 -rw-> T3 -realtime-> T1
    h = (
        H()
        .invoke(2, "ax1 ry")
        .invoke(3, "ay1")
        .complete(3, "ay1")
        .invoke(1, "rx")
        .complete(1, "rx")
        .complete(2, "ax1 ry")
    )
    assert check(h, "serializable")["valid"] is True
    r = check(h, "strict-serializable")
    assert r["anomaly_types"] == ["G2-item-realtime"] and r["not"] == ["strict-serializable"]


def test_internal():
    # checker-test "internal consistency violation": T2 appended 3 then read x without it at the end
    h = H().txn("ax1 ax2 ax4").txn("ax3 rx1234")
    r = check(h, "read-atomic")
    assert r["valid"] is False and "internal" in r["anomaly_types"]
    case = r["anomalies"]["internal"][0]
    assert case["expected"] == ["...", 3] and case["mop"] == ["r", "x", [1, 2, 3, 4]]
    assert check(H().txn("ax3 rx12"), "serializable")["anomaly_types"][-1] == "internal"
    assert check(H().txn("ax1").txn("ax3 rx1"), "read-committed")["valid"] is True


def test_future_read():
    # future-read-test
    r = check(H().txn("rx1 ax1"), "read-committed")
    assert r["valid"] is False and r["anomaly_types"] == ["empty-transaction-graph", "future-read"]
    assert r["not"] == ["read-committed"]


def _edn(ops: list[Op]) -> str:
    def v(x: Any) -> str:
        if x is None:
            return "nil"
        if isinstance(x, list):
            return "[" + " ".join(v(y) for y in x) + "]"
        return (
            f":{x}"
            if isinstance(x, str) and x in ("append", "r")
            else f'"{x}"'
            if isinstance(x, str)
            else str(x)
        )

    return "".join(
        f"{{:type :{o.type}, :f :txn, :value {v(o.value)}, :process {o.process}, :time {o.time}, :index {o.index}}}\n"
        for o in ops
    )


def test_garbage_read_a_value_nobody_appended(tmp_path: Path) -> None:
    """A read showing an element no transaction appended to that key (a key mix-up, a corrupted
    value): Elle lets it pass; every model down to read-uncommitted forbids it. An element a
    failed append wrote is G1a instead; one an info or a never-completed invocation may have
    written is not garbage. The same verdict from Op objects, JSON Lines and EDN."""
    h = H().txn("ax1").txn("ay7").txn("rx17")  # 7 went to y, yet x shows it
    r = check(h, "read-uncommitted")
    assert r["valid"] is False and "garbage-read" in r["anomaly_types"] and r["not"] == ["read-uncommitted"]
    (case,) = r["anomalies"]["garbage-read"]
    assert case["key"] == "x" and case["element"] == 7 and case["mop"] == ["r", "x", [1, 7]]
    assert "no transaction appended 7 to x" in case["explanation"]
    jl = tmp_path / "history.jsonl"
    write_history(jl, h.ops)
    ed = tmp_path / "history.edn"
    ed.write_text(_edn(h.ops))
    for path in (jl, ed):
        got = check_file(path, "list-append", "read-uncommitted")
        assert got["valid"] is False and "garbage-read" in got["anomaly_types"], path

    failed = H().txn("ax1").txn("ax7", type_="fail").txn("rx17")
    assert "garbage-read" not in check(failed, "read-uncommitted")["anomaly_types"]
    assert "G1a" in check(failed, "read-uncommitted")["anomaly_types"]
    maybe = H().txn("ax1").txn("ax7", type_="info").txn("rx17")
    assert check(maybe, "strict-serializable")["valid"] is True
    pending = H().txn("ax1").invoke(9, "ax7").txn("rx17")  # the append never completed
    assert check(pending, "strict-serializable")["valid"] is True
    write_history(jl, pending.ops)
    ed.write_text(_edn(pending.ops))
    for path in (jl, ed):
        assert check_file(path, "list-append", "strict-serializable")["valid"] is True, path


def test_duplicate_elements():
    # checker-test "duplicated elements": also a G1c
    h = H().txn("ax1 ry1").txn("ax2 ay1").txn("rx121")
    r = check(h, "read-committed")
    assert r["anomaly_types"] == ["G1c", "duplicate-elements"] and r["not"] == ["read-uncommitted"]
    assert r["anomalies"]["duplicate-elements"][0]["duplicates"] == {1: 2}
    assert check(h, "read-uncommitted")["valid"] is False


def test_incompatible_order():
    # checker-test "contradictory read orders"
    h = H().txn("ax1 ry1").txn("ax2").txn("ax3 ay1").txn("rx13").txn("rx123")
    r = check(h, "read-committed")
    assert r["valid"] is False and r["anomaly_types"] == ["G1c", "incompatible-order"]
    assert r["anomalies"]["incompatible-order"][0]["values"] == [[1, 3], [1, 2, 3]]
    assert r["not"] == ["read-committed"]


def test_dirty_update():
    # checker-test "dirty update": direct, and through an info writer
    h = H().txn("ax1", 0, "fail").txn("ax2", 1).txn("rx12", 2)
    r = check(h, "read-committed")
    assert "dirty-update" in r["anomaly_types"] and r["not"] == ["read-committed"]
    assert r["anomalies"]["dirty-update"][0]["values"] == [1, 2]
    h = H().txn("ax1", 0, "fail").txn("ax2", 1, "info").txn("ax3", 2).txn("rx123", 3)
    r = check(h, "read-committed")
    assert r["anomalies"]["dirty-update"][0]["values"] == [1, 2, 3]
    assert check(H().txn("ax1", 0, "fail"), "read-committed")["valid"] == "unknown"


def test_lost_update():
    # lost-update-test
    h = H().txn("ax0").txn("rx0 ax1").txn("rx0 ax2")
    r = check(h, "strict-serializable")
    assert r["anomaly_types"] == ["G2-item", "lost-update"] and r["not"] == ["ROLA", "cursor-stability"]
    assert check(H().txn("rx ax1 ax2").txn("rx12"), "strict-serializable")["valid"] is True


def test_unobserved_writes_follow_observed_ones():
    # unobserved-write-test
    h = H().invoke(0, "ax1 ay1").invoke(1, "ax2 ay2").invoke(2, "ax3 ay3").invoke(3, "rx12").invoke(4, "ry2")
    h.complete(0, "ax1 ay1").complete(1, "ax2 ay2").complete(2, "ax3 ay3").complete(3, "rx12").complete(
        4, "ry2"
    )
    r = check(h, "serializable")
    assert r["anomaly_types"] == ["G-single-item", "G0"] and r["not"] == ["read-uncommitted"]


def test_info_read_is_not_a_read_of_the_initial_state():
    # graph-test "info reads": T1 (info) appended 2 after T2's 1, its nil read of y says nothing
    h = H().txn("ax2 ry", 0, "info").txn("ax1 ay1", 1).txn("rx12 ry1", 2)
    assert check(h, "strict-serializable")["valid"] is True


def test_duplicate_appends_are_unknown():
    r = check(H().txn("ax1").txn("ax1").txn("rx1"), "serializable")
    assert r["valid"] == "unknown" and "duplicate appends" in r["cause"]


def test_search_out_of_budget_is_never_valid():
    # a ring of 300 transactions whose only cycle needs one rw edge, searched with no budget
    n = 300
    ops: list[Op] = []
    for i in range(n):
        ms: list[list[Any]] = [["append", "ring", i]]
        ms.append(
            ["append", "anti", 0] if i == 0 else ["r", "anti", None] if i == n - 1 else ["append", i, 0]
        )
        ops.append(Op("invoke", 0, "txn", ms, index=len(ops)))
        ops.append(Op("ok", 0, "txn", ms, index=len(ops)))
    rd = [["r", "ring", list(range(n))]]
    ops += [
        Op("invoke", 1, "txn", [["r", "ring", None]], index=len(ops)),
        Op("ok", 1, "txn", rd, index=len(ops) + 1),
    ]
    r = check_ops(ops, "list-append", "snapshot-isolation", time_limit=0.0)
    assert r["valid"] is not True
    r2 = check_ops(ops, "list-append", "snapshot-isolation")
    assert r2["valid"] is False and r2["anomaly_types"] == ["G-single-item"]


def test_rw_register_cases():
    # rw_register_test checker-test: G1c from two wr edges; G1a; G1b; internal; lost-update
    h = H(True).txn("wx1 ry1").txn("wy1 rx1")
    r = check(h, "read-committed")
    assert r["anomaly_types"] == ["G1c"] and r["not"] == ["read-committed"]
    assert check(h, "read-uncommitted")["valid"] is True
    r = check(H(True).txn("rx1").txn("wx1", type_="fail"), "read-committed")
    assert r["anomaly_types"] == ["G1a", "empty-transaction-graph"] and r["valid"] is False
    r = check(H(True).txn("wx1 wx2").txn("rx1"), "read-committed")
    assert r["anomaly_types"] == ["G1b", "empty-transaction-graph"]
    r = check(H(True).txn("rx1 rx2"), "serializable")
    assert "internal" in r["anomaly_types"] and r["anomalies"]["internal"][0]["expected"] == 1
    r = check(H(True).txn("wx0", 2).txn("rx0 wx1", 0).txn("rx0 wx2", 1), "serializable")
    assert r["valid"] is False and "lost-update" in r["anomaly_types"]
    assert r["not"] == ["ROLA", "cursor-stability"]
    # garbage-read (Elle's known gap, "Read doesn't return what was just been written"): a read of
    # a value nobody wrote; not one a failed, info or never-completed write may have written
    r = check(H(True).txn("rx0 wx1", 0).txn("rx0 wx2", 1), "read-uncommitted")
    assert r["valid"] is False and {"garbage-read", "lost-update"} <= set(r["anomaly_types"])
    assert r["not"] == ["read-uncommitted"] and r["anomalies"]["garbage-read"][0]["value"] == 0
    assert "no transaction wrote 0 to x" in r["anomalies"]["garbage-read"][0]["explanation"]
    for h in (
        H(True).txn("wx5", type_="info").txn("rx5"),
        H(True).invoke(7, "wx5").txn("rx5"),
        H(True).txn("wx5", type_="fail").txn("rx5"),
    ):
        assert "garbage-read" not in check(h, "read-uncommitted")["anomaly_types"]
    # "initial state": the nil read precedes the write T1 also read from (Elle names it G-single)
    h = H(True).invoke(0, "rx_ ry1").txn("wy1 wx2", 1).complete(0, "rx_ ry1")
    r = check(h, "serializable")
    assert r["valid"] is False and r["anomaly_types"] == ["G-single-item"]
    # "wfr": only with writes-follow-reads is the G-single visible
    h = H(True).txn("wy1").txn("ry1 wx1 wy2").txn("rx1 ry1")
    assert check(h, "serializable")["valid"] is True
    assert check(h, "serializable", wfr_keys=True)["anomaly_types"] == ["G-single-item"]
    # blind writes alone order nothing: unknown, never invalid
    assert check(H(True).txn("wx1 wy2").txn("wx2 wy1"), "serializable")["valid"] == "unknown"


def test_checker_on_file_and_edn(tmp_path: Path):
    h = H().txn("ax1 ry1").txn("ax2 ay1").txn("rx12")
    path = tmp_path / "history.jsonl"
    write_history(path, h.ops)
    r = ElleChecker("list-append", "read-committed").check({}, path, {})
    assert r["valid"] is False and r["anomaly_types"] == ["G1c"]
    assert check_file(path, "list-append", "read-uncommitted")["valid"] is True
    # an explanation fetches values back from the file
    assert r["anomalies"]["G1c"][0]["cycle"][0]["value"]
    from chaos.history.formats import load_edn

    edn = tmp_path / "h.edn"
    edn.write_text(
        "[{:type :invoke, :f :txn, :value [[:append :x 1] [:r :y nil]], :process 0, :time 1, :index 0}\n"
        " {:type :ok, :f :txn, :value [[:append :x 1] [:r :y [1]]], :process 0, :time 2, :index 1}\n"
        " {:type :invoke, :value [[:append :x 2] [:append :y 1]], :process 1, :index 2}\n"
        " {:type :ok, :value [[:append :x 2] [:append :y 1]], :process 1, :index 3}\n"
        " {:type :invoke, :f :txn, :value [[:r :x nil]], :process 2, :index 4}\n"
        " {:type :ok, :f :txn, :value [[:r :x [1 2]]], :process 2, :index 5}]\n"
    )
    ops, _model = load_edn(edn)
    r = check_ops(ops, "list-append", "serializable")
    assert r["anomaly_types"] == ["G1c"]


def test_rw_register_rw_edge_names_the_key_of_the_edge():
    """Issue 35 item 6: T1 read x = 1 and y = nil; T2 wrote x = 2, y = 1 and z = 1, which T1 read.
    The anti-dependency T1 -rw-> T2 holds on y (nil precedes every value), not on x (nothing orders
    x = 1 before x = 2): the explanation names y, never x."""
    h = H(True).txn("wx1").invoke(1, "rx_ ry_ rz_").txn("wx2 wy1 wz1", 2).complete(1, "rx1 ry_ rz1")
    r = check(h, "serializable")
    assert r["valid"] is False and r["anomaly_types"] == ["G-single-item"]
    [rw] = [e for e in r["anomalies"]["G-single-item"][0]["edges"] if e["type"] == "rw"]
    assert rw["why"].startswith("T1 read y = nil (the initial state), and T2 wrote y = 1"), rw["why"]
    assert " x " not in rw["why"] and "x =" not in rw["why"]
    # with writes-follow-reads, x = 1 -> x = 2 is ordered too, and the why names that pair
    h = H(True).txn("wx1").txn("rx1 wx2 wz1").txn("rx1 rz1")
    assert check(h, "serializable")["valid"] is True
    r = check(h, "serializable", wfr_keys=True)
    whys = [
        e["why"] for c in r["anomalies"].get("G-single-item", []) for e in c["edges"] if e["type"] == "rw"
    ]
    assert whys and all("x = 1, and T" in w and "wrote x = 2, the next version of x" in w for w in whys), r


def test_two_sequential_transactions_are_strict_serializable():
    """Issue 35 item 6: realtime order is an edge of the graph Elle tests for emptiness, so two
    transactions one after the other, with no data dependency, are valid at strict-serializable
    (Elle says so); run concurrently, nothing orders them and the graph is empty (unknown)."""
    for register, spec1, spec2 in ((True, "wx1", "wy1"), (False, "ax1", "ay1")):
        r = check(H(register).txn(spec1).txn(spec2), "strict-serializable")
        assert r["valid"] is True and "empty-transaction-graph" not in r["anomaly_types"], r["summary"]
        concurrent = H(register).invoke(0, spec1).invoke(1, spec2).complete(0, spec1).complete(1, spec2)
        r = check(concurrent, "strict-serializable")
        assert r["valid"] == "unknown" and r["anomaly_types"] == ["empty-transaction-graph"]
    # serializable adds no order: still nothing to check
    assert check(H(True).txn("wx1").txn("wy1"), "serializable")["valid"] == "unknown"


def test_a_cycle_explanation_names_its_anomaly_nowhere_and_ends_with_the_cycle():
    """Issue 35 item 6: readers show the anomaly's name beside the explanation once (the terminal
    printed ``G-single-item: G-single-item:``); the report lists each edge's why once."""
    import html as htmllib

    from chaos.history.report.txn import case_html

    h = H().invoke(0, "ax1 ry").invoke(1, "ay1 rx").complete(0, "ax1 ry").complete(1, "ay1 rx")
    r = check(h, "serializable")
    [(kind, [case, *_])] = [(k, v) for k, v in r["anomalies"].items()]
    assert kind == "G2-item"
    assert not case["explanation"].startswith(kind) and kind not in case["explanation"]
    assert case["explanation"].startswith("Let T1 = op ") and case["explanation"].endswith(case["conclusion"])
    html = case_html(case).split("</svg>", 1)[1]  # the drawing's edges carry their why as a tooltip
    for e in case["edges"]:
        assert html.count(htmllib.escape(e["why"])) == 1, e["why"]
    assert html.count(htmllib.escape(case["conclusion"])) == 1


def test_chaos_check_prints_the_anomaly_name_once(tmp_path: Path):
    """Issue 35 item 6, the terminal: ``chaos check`` on an invalid history printed
    ``G2-item: G2-item: ...``; the name now comes once, then the explanation."""
    import subprocess
    import sys

    h = H().invoke(0, "ax1 ry").invoke(1, "ay1 rx").complete(0, "ax1 ry").complete(1, "ay1 rx")
    path = tmp_path / "history.jsonl"
    write_history(path, h.ops)
    cmd = [sys.executable, "-m", "chaos.cli", "check", str(path), "--workload", "list-append"]
    cmd += ["--consistency-model", "serializable"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    lines = [ln for ln in out.stdout.splitlines() if "G2-item:" in ln]
    assert lines and all(ln.count("G2-item") == 1 for ln in lines), out.stdout
    assert sum("Let T1 = op" in ln for ln in out.stdout.splitlines()) == 1, out.stdout
