"""The transactional workloads (list-append, rw-register): Elle's generator shape, the client
template's fail / info rules, and list-append through DLedger's ``txn`` client on 3 real local
members, checked strict-serializable by Elle."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

import pytest
from test_dledger_cluster import Cluster

from chaos.control import generator as gen
from chaos.control.client import Failed, Indeterminate, TxnClient
from chaos.control.interpreter import Interpreter
from chaos.control.node import Node
from chaos.history.checkers.elle import check_file
from chaos.history.op import Op
from chaos.history.store import HistoryWriter, read_history
from chaos.workloads import get as get_workload
from chaos.workloads.txn import TxnWorker, _exponential_slot, txn_options
from chaos_dledger.clients import open_client
from dledger.client import DLedgerClient
from dledger.statemachine import KVStateMachine, TxnAborted, check_txn

if TYPE_CHECKING:
    from chaos.control.test import Test


def _txns(name: str, n: int, **opts: Any) -> list[list[list[Any]]]:
    wl = get_workload(name, opts)
    ops = gen.simulate(gen.clients(gen.limit(n, wl.generator)), concurrency=4, seed=1)
    return [o.value for o in ops if o.type == "invoke"]


def test_list_append_has_elles_generator_shape() -> None:
    txns = _txns("list-append", 3000, key_count=5, min_txn_length=2, max_txn_length=3, max_writes_per_key=8)
    assert all(2 <= len(t) <= 3 for t in txns)
    assert {m[0] for t in txns for m in t} == {"r", "append"}
    appends: dict[int, list[int]] = {}
    for t in txns:
        for f, k, v in t:
            if f == "append":
                appends.setdefault(k, []).append(v)
            else:
                assert v is None
    # values 1, 2, 3, ... per key (unique), and a key retires after 8 writes
    assert all(vs == list(range(1, len(vs) + 1)) and len(vs) <= 8 for vs in appends.values())
    assert len(appends) > 5 * 3  # retired keys were replaced by fresh ones
    active_at_once = {k for t in txns[-50:] for _, k, _ in t}
    assert len(active_at_once) <= 5 + 8  # about key_count live keys (a few retired within the window)


def test_rw_register_writes_unique_values_with_w() -> None:
    txns = _txns("rw-register", 500)
    writes = [(k, v) for t in txns for f, k, v in t if f == "w"]
    assert writes and {m[0] for t in txns for m in t} == {"r", "w"}
    assert len(set(writes)) == len(writes)
    assert all(1 <= len(t) <= 4 for t in txns)


def test_keys_follow_an_exponential_distribution_over_the_slots() -> None:
    rng = random.Random(3)
    counts = Counter(_exponential_slot(rng.random(), 10) for _ in range(50_000))
    assert set(counts) == set(range(10))
    assert 7 < counts[0] / counts[9] < 14  # first slot about 10x the last
    assert all(counts[i] > counts[i + 1] for i in range(9))


@pytest.mark.parametrize(
    "opts", [{"key_count": 0}, {"min_txn_length": 5, "max_txn_length": 2}, {"max_writes_per_key": -1}]
)
def test_bad_options_are_refused(opts: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        txn_options(opts)


class MemoryTxn:
    """A ``txn`` client over one shared in-memory KV state machine, with scripted failures."""

    def __init__(self, sm: KVStateMachine, raise_next: Exception | None = None, garble: bool = False):
        self.sm, self.raise_next, self.garble = sm, raise_next, garble

    def txn(self, mops: list[list[Any]]) -> Any:
        if self.raise_next is not None:
            raise self.raise_next
        out = self.sm.apply_txn(check_txn([[f, str(k), v] for f, k, v in mops]))
        if isinstance(out, TxnAborted):
            raise Failed(out.reason)
        got = [[f, k, o[2]] for (f, k, _), o in zip(mops, out, strict=True)]
        return got[:-1] if self.garble else got

    def close(self) -> None:
        pass


class MemoryDB:
    client_protocols = frozenset({"txn"})

    def __init__(self, client: MemoryTxn) -> None:
        self.c = client

    def open_client(self, protocol: str, test: Any, node: Node, process: Any) -> MemoryTxn:
        assert isinstance(self.c, TxnClient)
        return self.c


def _invoke(client: MemoryTxn, mops: list[list[Any]]) -> Op:
    test = SimpleNamespace(db=MemoryDB(client), nodes=[Node("n1", "n1")])
    worker = TxnWorker().open(test, "n1")
    return worker.invoke(test, Op("invoke", 0, "txn", mops, time=0, index=0))


def test_the_client_template_records_ok_fail_and_info() -> None:
    sm = KVStateMachine()
    ok = _invoke(MemoryTxn(sm), [["append", 1, 1], ["r", 1, None]])
    assert ok.type == "ok" and ok.value == [["append", 1, 1], ["r", 1, [1]]]
    sm.data["2"] = 5
    aborted = _invoke(MemoryTxn(sm), [["append", 1, 2], ["append", 2, 1]])
    assert aborted.type == "fail" and aborted.value == [["append", 1, 2], ["append", 2, 1]]
    assert sm.data["1"] == [1]  # nothing of the aborted txn
    timeout = _invoke(MemoryTxn(sm, Indeterminate("timed out")), [["append", 1, 3]])
    assert timeout.type == "info" and "timed out" in (timeout.error or "")
    garbled = _invoke(MemoryTxn(sm, garble=True), [["r", 1, None], ["append", 1, 4]])
    assert garbled.type == "info" and "answered" in (garbled.error or "")


class LocalDB:
    client_protocols = frozenset({"txn"})

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def open_client(self, protocol: str, test: Any, node: Node, process: Any) -> Any:
        return open_client(
            protocol, lambda n: DLedgerClient(self.cluster.peers, timeout=2.0, prefer=n), node.name, process
        )


@pytest.fixture
def local(tmp_path: Path) -> Iterator[tuple[Cluster, SimpleNamespace]]:
    c = Cluster(tmp_path, 3, "--read-mode", "read-index")
    c.start_all()
    c.leader(timeout=60)
    try:
        yield c, SimpleNamespace(db=LocalDB(c), nodes=list(c.ids))
    finally:
        for n in list(c.procs):
            c.kill(n)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["list-append", "rw-register"])
def test_txn_workloads_on_dledger_are_strict_serializable(
    name: str, local: tuple[Cluster, SimpleNamespace], tmp_path: Path
) -> None:
    cluster, test = local
    wl = get_workload(name, {"key_count": 4, "max_writes_per_key": 16})
    assert wl.protocol == "txn" and wl.checkers == ["elle", "stats", "perf"]
    path = tmp_path / "history.jsonl"
    writer = HistoryWriter(path)
    it = Interpreter(
        cast("Test", test),
        client=wl.client,
        nemesis=None,
        nodes=cluster.ids,
        concurrency=6,
        history=writer,
        rng=random.Random(5),
        idempotent=wl.idempotent,
    )
    try:
        it.run(gen.clients(gen.limit(400, wl.generator)))
    finally:
        writer.close()
    ops = list(read_history(path))
    done = [o for o in ops if o.type == "ok"]
    assert len(done) > 300 and {o.f for o in ops} == {"txn"}
    if name == "list-append":  # reads see whole lists
        assert any(m[0] == "r" and m[2] and len(m[2]) > 1 for o in done for m in o.value)
    else:  # and registers single values someone wrote
        assert any(m[0] == "r" and isinstance(m[2], int) for o in done for m in o.value)
    r = check_file(path, name, "strict-serializable")
    assert r["valid"] is True, r["summary"]
    assert r["txns"] >= len(done)
