"""The KV state machine's micro-ops for Jepsen's bank, counter and set workloads (``add``, ``sadd``,
``init``): atomic apply on the state machine, then on 3 real members through the client."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_dledger_cluster import Cluster

from dledger.statemachine import KVStateMachine, TxnAborted, check_txn, encode_txn
from dledger.store import MAGIC_NORMAL, Entry


def _apply(sm: KVStateMachine, mops: list[list[object]]) -> object:
    body = encode_txn(mops)
    return sm.on_apply([Entry(index=sm.last_applied + 1, term=1, body=body, magic=MAGIC_NORMAL)])[0]


def test_init_writes_only_absent_keys_and_add_moves_balances_atomically() -> None:
    sm = KVStateMachine()
    assert _apply(sm, [["init", "a", 10], ["init", "b", 0]]) == [["init", "a", 10], ["init", "b", 0]]
    _apply(sm, [["init", "a", 99], ["init", "b", 99]])  # present: unchanged
    assert sm.data == {"a": 10, "b": 0}
    assert _apply(sm, [["add", "a", -4], ["add", "b", 4]]) == [["add", "a", -4], ["add", "b", 4]]
    assert sm.data == {"a": 6, "b": 4}
    refused = _apply(sm, [["add", "b", 3], ["add", "a", -7]])  # a would go negative: nothing applies
    assert isinstance(refused, TxnAborted) and "negative" in refused.reason
    assert sm.data == {"a": 6, "b": 4}
    assert isinstance(_apply(sm, [["append", "l", 1], ["add", "l", 1]]), TxnAborted)
    assert "l" not in sm.data


def test_add_counts_from_zero_and_sadd_keeps_one_copy_in_first_order() -> None:
    sm = KVStateMachine()
    for d in (1, 2, 3):
        _apply(sm, [["add", "c", d]])
    _apply(sm, [["sadd", "s", 5], ["sadd", "s", 3], ["sadd", "s", 5]])
    assert _apply(sm, [["r", "c", None], ["r", "s", None]]) == [["r", "c", 6], ["r", "s", [5, 3]]]
    assert sm.read_txn([["r", "s", None]]) == [["r", "s", [5, 3]]]


@pytest.mark.parametrize("bad", [[["add", "c", "1"]], [["add", "c", 1.5]], [["add", "c", True]]])
def test_add_refuses_a_non_integer_delta(bad: list[list[object]]) -> None:
    with pytest.raises(ValueError, match="integer delta"):
        check_txn(bad)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, 3)
    c.start_all()
    yield c
    for n in list(c.procs):
        c.kill(n)


@pytest.mark.slow
def test_transfers_counters_and_sets_on_a_real_group(cluster: Cluster) -> None:
    leader = cluster.leader()
    follower = next(n for n in cluster.ids if n != leader)
    accounts = [f"b{i}" for i in range(4)]
    with cluster.client(prefer=follower, timeout=3.0) as c:
        assert c.kv_txn([["init", accounts[0], 40], *[["init", a, 0] for a in accounts[1:]]]).ok

    def worker(i: int) -> None:
        with cluster.client(timeout=5.0) as c:
            for j in range(15):
                frm, to = accounts[(i + j) % 4], accounts[(i + j + 1) % 4]
                r = c.kv_txn([["add", frm, -3], ["add", to, 3]])
                assert r.ok or "negative" in (r.error or ""), r
                assert c.kv_txn([["add", "count", 1], ["sadd", "set", i * 100 + j]]).ok

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with cluster.client(prefer=follower, timeout=3.0) as c:
        got = c.kv_txn([["r", a, None] for a in [*accounts, "count", "set"]], read_mode="read-index")
    assert got.ok, got
    values = [m[2] for m in got.value]
    assert sum(values[:4]) == 40 and min(values[:4]) >= 0
    assert values[4] == 60
    assert sorted(values[5]) == sorted(i * 100 + j for i in range(4) for j in range(15))
    with cluster.client(timeout=3.0) as c:
        refused = c.kv_txn([["add", "count", -61]])
        assert refused.outcome == "fail" and "negative" in (refused.error or "")
        bad = c.kv_txn([["add", "count", "x"]])
        assert bad.outcome == "fail" and bad.code == 411


def test_a_refused_transfer_is_a_no_match_and_not_the_cluster_unavailable() -> None:
    """A transfer the state machine refused was served (its precondition, a balance covering it,
    did not hold): ``fail`` with ``compare_failed``, counted as a no match; a NOT_LEADER stays
    unavailable. Before, every refused transfer of a healthy run counted as an outage."""
    from types import SimpleNamespace

    from chaos.control.client import complete
    from chaos.history.analysis import NO_MATCH, UNAVAILABLE, fail_class
    from chaos.history.op import Op
    from chaos_dledger.clients import DLedgerBankClient

    answers = {
        "refused": SimpleNamespace(
            outcome="fail", node="n2", code=411, error="txn aborted: add -5 to 'a4': 1 + -5 would be negative"
        ),
        "not-leader": SimpleNamespace(outcome="fail", node="n3", code=501, error="NOT_LEADER"),
    }
    kinds = {}
    for name, answer in answers.items():
        conn = SimpleNamespace(kv_txn=lambda mops, a=answer: a, close=lambda: None)
        client = DLedgerBankClient(lambda node, c=conn: c, "n1")
        op = Op(
            index=0, type="invoke", process=0, f="transfer", value={"from": 4, "to": 0, "amount": 5}, time=0
        )
        comp = complete(op, lambda c=client: c.transfer(4, 0, 5))
        assert comp.type == "fail" and comp.node == answer.node, comp
        kinds[name] = (fail_class(comp), comp.extra.get("compare_failed"))
    assert kinds == {"refused": (NO_MATCH, True), "not-leader": (UNAVAILABLE, None)}
