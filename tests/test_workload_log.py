"""The log and register workloads' clients against real local ``dledger server`` processes (3 members
on 127.0.0.x): the log workload's generator run by the real interpreter (appends mixed with
read-range ops on every node, then final reads) gives a history both log checkers find valid; a
read-range stays on its node; a sticky register process records its own node's NOT_LEADER."""

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
from chaos.history.checkers.logcheck import LogChecker, LogReadsChecker
from chaos.history.op import Op
from chaos.history.store import HistoryWriter, read_history
from chaos.workloads import log, register
from chaos_dledger.clients import open_client
from dledger.client import DLedgerClient

if TYPE_CHECKING:
    from chaos.control.test import Test


class LocalDB:
    """What the workloads ask of ``test.db`` (the clients capability), for a local :class:`Cluster`:
    DLedger's own register and log clients, as ``DLedgerDB.open_client`` makes them."""

    client_protocols = frozenset({"register", "log"})

    def __init__(self, cluster: Cluster, sticky: bool = True) -> None:
        self.cluster = cluster
        self.sticky = sticky

    def client(self, nodes: Any, node_name: str | None = None) -> DLedgerClient:
        return DLedgerClient(self.cluster.peers, timeout=1.0, prefer=node_name)

    def open_client(self, protocol: str, test: Any, node: Node, process: Any) -> Any:
        return open_client(protocol, lambda n: self.client(None, n), node.name, process, sticky=self.sticky)


@pytest.fixture
def local(tmp_path: Path) -> Iterator[tuple[Cluster, SimpleNamespace]]:
    c = Cluster(tmp_path, 3)
    c.start_all()
    c.leader(timeout=60)  # the machine is shared: an election may take a while under load
    try:
        yield c, SimpleNamespace(db=LocalDB(c), nodes=list(c.ids))
    finally:
        for n in list(c.procs):
            c.kill(n)


def test_log_workload_reads_every_node_and_checks_valid(
    local: tuple[Cluster, SimpleNamespace], tmp_path: Path
) -> None:
    cluster, test = local
    wl = log.workload({"node_names": cluster.ids, "read_fraction": 0.3, "read_window": 8})
    assert wl.checkers == ["log", "log-reads", "stats", "perf"]
    path = tmp_path / "history.jsonl"
    writer = HistoryWriter(path)
    it = Interpreter(
        cast("Test", test),  # a stand-in with the fields the log client reads
        client=wl.client,
        nemesis=None,
        nodes=cluster.ids,
        concurrency=6,
        history=writer,
        rng=random.Random(5),
        idempotent=wl.idempotent,
    )
    try:
        it.run(gen.phases(gen.clients(gen.limit(300, wl.generator)), gen.clients(wl.final_generator)))
    finally:
        writer.close()
    ops = list(read_history(path))
    done = [op for op in ops if op.type == "ok"]
    ranges = [op for op in done if op.f == "read-range"]
    # every node asked during the run, each completion naming it (on a loaded machine every read of
    # one node may time out: a failed read still names the node it went to)
    asked = {op.node for op in ops if op.f == "read-range" and op.type != "invoke"}
    assert asked == set(cluster.ids)
    assert len({op.node for op in ranges}) >= 2
    assert all(isinstance(op.extra["from_index"], int) for op in ranges)
    assert any(op.extra["to_end"] for op in ranges)
    # a range that stops short of the node's end says why: a GET that failed (a timeout on a loaded
    # machine) or the window's cap of 8 + 64 entries
    assert all(op.extra["to_end"] or op.extra.get("error") or len(op.value) == 8 + 64 for op in ranges)
    assert any(x is not None for op in ranges for x in op.value)
    appends = sorted(op.value for op in ops if op.f == "append" and op.type == "invoke")
    assert appends == list(range(len(appends)))  # unique values, none skipped by the reads
    assert sorted(op.node or "" for op in done if op.f == "read") == sorted(cluster.ids)
    for checker in (LogChecker(), LogReadsChecker()):
        r = checker.check({"workload": "log"}, path, {})
        assert r["valid"] is True, r
    r = LogReadsChecker().check({"workload": "log"}, path, {})
    assert r["reads"] == len(ranges) + 3 and r["ok_count"] == r["known_count"] > 0


def test_read_range_stays_on_its_node(local: tuple[Cluster, SimpleNamespace]) -> None:
    cluster, test = local
    leader = cluster.leader(timeout=60)
    with cluster.client() as c:
        for v in range(5):
            assert c.append(str(v).encode()).ok
    cluster.wait_caught_up()
    follower = next(n for n in cluster.ids if n != leader)
    client = log.LogWorker(window=3).open(test, follower)
    try:
        comp = client.invoke(test, Op("invoke", 0, "read-range", None, time=0, index=0))
    finally:
        client.close(test)
    assert comp.type == "ok" and comp.node == follower
    commit = comp.extra["commit_index"]
    assert comp.extra["from_index"] == commit - 2 and comp.extra["to_end"] is True
    assert comp.value[-1] == 4 and len(comp.value) == 3
    cluster.kill(follower)
    client = log.LogWorker().open(test, follower)
    try:
        down = client.invoke(test, Op("invoke", 0, "read-range", None, time=0, index=1))
    finally:
        client.close(test)
    assert down.type == "fail" and down.node == follower  # never answered by another member


def test_sticky_register_process_records_its_nodes_answer(local: tuple[Cluster, SimpleNamespace]) -> None:
    cluster, test = local
    leader = cluster.leader(timeout=60)
    follower = next(n for n in cluster.ids if n != leader)
    client = register.RegisterWorker().open(test, follower)
    try:
        follows = client.invoke(test, Op("invoke", 0, "write", 3, time=0, index=0, key=1))
        write = client.invoke(test, Op("invoke", 1, "write", 4, time=0, index=1, key=1))
        read = client.invoke(test, Op("invoke", 0, "read", None, time=0, index=2, key=1))
        sticks = client.invoke(test, Op("invoke", 1, "read", None, time=0, index=3, key=1))
    finally:
        client.close(test)
    assert follows.type == "ok" and "sticky" not in follows.extra
    assert write.type == "ok" and "sticky" not in write.extra  # writes follow the leader
    assert read.type == "ok" and read.value == 4
    # raft-log reads go through the log: the follower answers NOT_LEADER naming the leader, and
    # the sticky reader follows the redirect as DLedger's client does (issue 35 item 1)
    assert sticks.type == "ok" and sticks.value == 4 and sticks.node == leader
    assert sticks.extra["sticky"] is True and sticks.extra["redirected_from"] == follower
    unstuck = SimpleNamespace(db=LocalDB(cluster, sticky=False), nodes=test.nodes)
    off = register.RegisterWorker().open(unstuck, follower)
    try:
        assert off.invoke(unstuck, Op("invoke", 1, "read", None, time=0, index=4, key=1)).value == 4
    finally:
        off.close(unstuck)
    with pytest.raises(ValueError, match="sticky"):
        DLedgerClient(cluster.peers, sticky=True)


def test_sticky_read_sent_to_a_paused_node_is_answered_when_it_resumes(
    local: tuple[Cluster, SimpleNamespace],
) -> None:
    """A sticky read queued at a SIGSTOPped member waits past the 1 s client timeout and records the
    member's own answer after SIGCONT (here a follower's NOT_LEADER naming the leader, followed to
    it), not an indeterminate info."""
    import signal
    import threading

    cluster, test = local
    leader = cluster.leader(timeout=60)
    follower = next(n for n in cluster.ids if n != leader)
    client = register.RegisterWorker().open(test, follower)
    proc = cluster.procs[follower]
    out: list[Op] = []
    try:
        proc.send_signal(signal.SIGSTOP)
        t = threading.Thread(
            target=lambda: out.append(
                client.invoke(test, Op("invoke", 1, "read", None, time=0, index=0, key=1))
            )
        )
        t.start()
        t.join(2.5)  # longer than the client timeout: the read is still waiting for the paused member
        assert t.is_alive() and not out
        proc.send_signal(signal.SIGCONT)
        t.join(30)
    finally:
        proc.send_signal(signal.SIGCONT)
        client.close(test)
    assert len(out) == 1
    assert out[0].type == "ok" and out[0].node == leader
    assert out[0].extra["sticky"] is True and out[0].extra["redirected_from"] == follower
