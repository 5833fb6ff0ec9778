"""Jepsen's bank, set, counter and long-fork workloads: their generators' shapes, then each through
DLedger's clients on 3 real local members (read-index reads), judged valid by its checker; with
``--read-mode unsafe`` the counter's stale follower reads are caught."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

import pytest
from test_dledger_cluster import Cluster

from chaos.control import generator as gen
from chaos.control.interpreter import Interpreter
from chaos.control.node import Node
from chaos.history.checkers.registry import checkers_for, compose
from chaos.history.store import HistoryWriter, read_history
from chaos.workloads import get as get_workload
from chaos.workloads.bank import initial_balances
from chaos_dledger.clients import open_client
from dledger.client import DLedgerClient

if TYPE_CHECKING:
    from chaos.control.test import Test


def _invokes(name: str, n: int, **opts: Any) -> list[Any]:
    wl = get_workload(name, opts)
    ops = gen.simulate(gen.clients(gen.limit(n, wl.generator)), concurrency=4, seed=1)
    return [o for o in ops if o.type == "invoke"]


def test_bank_generator_is_jepsens_mix_of_transfers_between_two_accounts_and_reads() -> None:
    ops = _invokes("bank", 200)
    transfers = [o.value for o in ops if o.f == "transfer"]
    assert 60 < len(transfers) < 140 and {o.f for o in ops} == {"transfer", "read"}
    assert all(t["from"] != t["to"] and 1 <= t["amount"] <= 5 and 0 <= t["from"] < 8 for t in transfers)
    assert sum(initial_balances().values()) == 100 and initial_balances()[0] == 16


def test_set_adds_unique_values_and_reads_every_node_at_the_end() -> None:
    ops = _invokes("set", 200, node_names=["n1", "n2"])
    adds = [o.value for o in ops if o.f == "add"]
    assert adds == list(range(len(adds))) and 20 < 200 - len(adds) < 80
    wl = get_workload("set", {"node_names": ["n1", "n2"]})
    assert [o["node"] for o in wl.final_generator] == ["n1", "n2"]


def test_long_fork_writes_each_key_once_then_reads_its_group() -> None:
    ops = _invokes("long-fork", 300)
    writes = [o.value[0][1] for o in ops if o.value[0][0] == "append"]
    assert writes == list(range(len(writes))) and len(writes) > 50
    by_process: dict[Any, list[Any]] = {}
    for o in ops:
        by_process.setdefault(o.process, []).append(o.value)
    for txns in by_process.values():  # a worker's write is followed by a read of its group
        for a, b in zip(txns, txns[1:], strict=False):
            if a[0][0] == "append":
                k = a[0][1]
                assert sorted(m[1] for m in b) == [k - k % 2, k - k % 2 + 1] and all(m[0] == "r" for m in b)


class LocalDB:
    client_protocols = frozenset({"bank", "set", "counter", "txn"})

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def open_client(self, protocol: str, test: Any, node: Node, process: Any) -> Any:
        return open_client(
            protocol, lambda n: DLedgerClient(self.cluster.peers, timeout=2.0, prefer=n), node.name, process
        )


def _run(cluster: Cluster, name: str, tmp_path: Path, n: int = 300, **opts: Any) -> dict[str, Any]:
    test = SimpleNamespace(db=LocalDB(cluster), nodes=list(cluster.ids))
    wl = get_workload(name, {"node_names": list(cluster.ids), **opts})
    path = tmp_path / f"{name}.jsonl"
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
        main = gen.clients(gen.limit(n, wl.generator))
        it.run(gen.phases(main, gen.clients(wl.final_generator)) if wl.final_generator else main)
    finally:
        writer.close()
    ops = list(read_history(path))
    assert sum(o.type == "ok" for o in ops) > n // 2, [o for o in ops if o.type != "ok"][:3]
    doc = {"workload": name, "checkers": wl.checkers}
    return compose(checkers_for(doc)).check(doc, path, {})["checkers"]


@pytest.fixture
def local(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    c = Cluster(tmp_path, 3, "--read-mode", getattr(request, "param", "read-index"))
    c.start_all()
    c.leader(timeout=60)
    try:
        yield c
    finally:
        for n in list(c.procs):
            c.kill(n)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bank", "set", "counter", "long-fork"])
def test_each_workload_on_dledger_is_valid(name: str, local: Cluster, tmp_path: Path) -> None:
    checker = {"set": "set-full-linearizable"}.get(name, name)
    r = _run(local, name, tmp_path)
    assert r[checker]["valid"] is True, r[checker]
    assert r["stats"]["valid"] is True, r["stats"]
