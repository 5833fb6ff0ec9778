"""Transactions in DLedger's KV state machine: the state machine's atomic apply, then ``txn`` on 3
real members in every read mode, through the client and ``dledger kv txn``."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_dledger_cluster import Cluster

from dledger.statemachine import KVStateMachine, TxnAborted, check_txn, decode_kv, encode_txn
from dledger.store import MAGIC_NORMAL, Entry

MODES = ["raft-log", "read-index", "lease", "unsafe"]


def _apply(sm: KVStateMachine, mops: list[list[object]]) -> object:
    body = encode_txn(mops)
    return sm.on_apply([Entry(index=sm.last_applied + 1, term=1, body=body, magic=MAGIC_NORMAL)])[0]


def test_a_txn_applies_in_order_and_reads_its_own_writes() -> None:
    sm = KVStateMachine()
    out = _apply(
        sm, [["r", "x", None], ["append", "x", 1], ["append", "x", 2], ["r", "x", None], ["w", "y", 5]]
    )
    assert out == [
        ["r", "x", None],
        ["append", "x", 1],
        ["append", "x", 2],
        ["r", "x", [1, 2]],
        ["w", "y", 5],
    ]
    out = _apply(sm, [["r", "y", None], ["w", "y", None], ["r", "y", None], ["r", "x", None]])
    assert out == [["r", "y", 5], ["w", "y", None], ["r", "y", None], ["r", "x", [1, 2]]]
    assert sm.data == {"x": [1, 2]}  # a write of None makes the key absent


def test_an_aborted_txn_changes_nothing() -> None:
    sm = KVStateMachine()
    _apply(sm, [["w", "s", "text"], ["append", "l", 1]])
    out = _apply(sm, [["append", "l", 2], ["w", "z", 1], ["append", "s", 3]])
    assert isinstance(out, TxnAborted) and "'s'" in out.reason
    assert sm.data == {"s": "text", "l": [1]}


def test_a_read_answers_a_copy_that_later_appends_do_not_change() -> None:
    sm = KVStateMachine()
    _apply(sm, [["append", "l", 1]])
    seen = sm.read_txn(check_txn([["r", "l", None]]))
    _apply(sm, [["append", "l", 2]])
    assert seen == [["r", "l", [1]]] and sm.data["l"] == [1, 2]


@pytest.mark.parametrize(
    "bad",
    [[], [["x", "k", 1]], [["r", 1, None]], [["w", "k"]], "r k", [["append", "k", 1], None]],
)
def test_malformed_micro_ops_are_refused(bad: object) -> None:
    with pytest.raises(ValueError):
        encode_txn(bad)


def test_the_txn_entry_round_trips_through_the_kv_codec() -> None:
    assert decode_kv(encode_txn([["append", "k", 3]])) == ["txn", "", [["append", "k", 3]]]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, 3)
    c.start_all()
    yield c
    for n in list(c.procs):
        c.kill(n)


@pytest.mark.slow
def test_txns_on_a_real_group_in_every_read_mode(cluster: Cluster) -> None:
    leader = cluster.leader()
    follower = next(n for n in cluster.ids if n != leader)
    with cluster.client(prefer=follower, timeout=3.0) as c:
        r = c.kv_txn([["append", "a", 1], ["w", "b", 7], ["r", "a", None]])
        assert r.ok, r
        assert r.value == [["append", "a", 1], ["w", "b", 7], ["r", "a", [1]]]
        assert c.kv_txn([["append", "a", 2]]).ok
        for mode in MODES:
            got = c.kv_txn([["r", "a", None], ["r", "b", None], ["r", "c", None]], read_mode=mode)
            assert got.ok, (mode, got)
            if mode != "unsafe":  # the follower may not have applied the last append yet
                assert got.value == [["r", "a", [1, 2]], ["r", "b", 7], ["r", "c", None]], mode
        aborted = c.kv_txn([["append", "b", 1]])  # b holds 7, not a list
        assert aborted.outcome == "fail" and "txn aborted" in (aborted.error or "")
        assert c.kv_txn([["r", "b", None]]).value == [["r", "b", 7]]
        refused = c.kv_txn([["bogus", "a", 1]])
        assert refused.outcome == "fail" and refused.code == 411


@pytest.mark.slow
def test_concurrent_appends_are_all_kept_in_one_order(cluster: Cluster) -> None:
    cluster.leader()

    def worker(i: int) -> None:
        with cluster.client(timeout=5.0) as c:
            for j in range(10):
                assert c.kv_txn([["append", "k", i * 100 + j], ["append", f"own{i}", j]]).ok

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with cluster.client(timeout=3.0) as c:
        value = c.kv_txn([["r", "k", None], *[["r", f"own{i}", None] for i in range(4)]]).value
    seen = value[0][2]
    assert sorted(seen) == sorted(i * 100 + j for i in range(4) for j in range(10))
    for i in range(4):  # each worker's appends in its own order, on both keys
        assert [v - i * 100 for v in seen if v // 100 == i] == list(range(10))
        assert value[1 + i][2] == list(range(10))


@pytest.mark.slow
def test_dledger_kv_txn_on_the_command_line(cluster: Cluster) -> None:
    cluster.leader()

    def cli(*args: str) -> tuple[int, dict[str, object]]:
        p = subprocess.run(
            [sys.executable, "-m", "dledger.cli", "kv", "--peers", cluster.peers, "--timeout", "3", *args],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return p.returncode, json.loads(p.stdout) if p.stdout.strip() else {"stderr": p.stderr}

    rc, out = cli("txn", "append:x=1", "w:y=hello", "r:x")
    assert rc == 0 and out["txn"] == [["append", "x", 1], ["w", "y", "hello"], ["r", "x", [1]]], out
    rc, out = cli("txn", '[["r", "y", null], ["r", "x", null]]')
    assert rc == 0 and out["txn"] == [["r", "y", "hello"], ["r", "x", [1]]], out
    rc, _ = cli("txn", "r:x=1")
    assert rc == 254
