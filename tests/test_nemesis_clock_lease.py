"""The clock fault reaches what DLedger measures: a leader whose monotonic clock runs slow keeps
its lease (``--read-mode lease``) long after it ran out in real time, and serves a stale read.

Real servers on real node containers. The leader's clock is slowed to 1/50 (far beyond the drift the
lease tolerates: it keeps ``lease_ms - heartbeat_ms`` of margin, so a ratio of 1.5) and, within the
followers' election timeout, the leader is isolated. The majority elects a new leader, which commits
a write; the old leader, sticky-read with ``readMode=lease``, still answers the value before that
write: a stale read. Control: the same steps without the clock fault, and the old leader refuses.
This is what a server that serves lease reads after the lease expired looks like; the register
workload's sticky processes and the linearizability checker catch it in a run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from test_nemesis_support import make_test, node_cluster

from chaos.nemesis.base import nemesis_op
from chaos.nemesis.cli import heal_control
from chaos.nemesis.clock import ClockNemesis
from chaos.nemesis.partition import PartitionNemesis

pytestmark = [pytest.mark.docker, pytest.mark.slow]

CLUSTER = os.environ.get("CHAOS_NEMESIS_CLUSTER", "nemtest")


@pytest.fixture(scope="module")
def env() -> Iterator[Any]:
    from chaos_dledger.db import DLedgerDB

    with node_cluster(CLUSTER) as (nodes, control):
        db = DLedgerDB(flush="sync", read_mode="lease")
        try:
            heal_control(control)
            yield make_test(nodes, control, db)
        finally:
            heal_control(control)
            db.teardown(control)


def bound(test: Any, name: str) -> Any:
    """A client of one node only (sticky: no discovery, no redirect)."""
    c = test.db.client(test.nodes, name)
    c.sticky = True
    return c


def isolate_slow_leader(test: Any, slow: bool) -> tuple[str, str | None, Any]:
    """Set up the cluster, write 1, then (optionally slow the leader's clock and) isolate the leader;
    wait for a new leader, write 2 through it, and lease-read the old leader.
    Returns (old leader, new leader, the old leader's lease-read result)."""
    test.db.setup(test.control)
    names = [n.name for n in test.nodes]
    old = test.db.primaries(test.control)[0]
    c = bound(test, old)
    assert c.kv_put("k", 1).ok
    assert c.kv_get("k", read_mode="lease").value == 1
    others = [n for n in names if n != old]
    grudge = {old: others, **{n: [old] for n in others}}
    if slow:  # slow first, then cut off (as clock-slow-leader does): on a loaded machine a cut made
        # first let the lease run out on the real clock before the slowdown took effect
        rates = {"mode": "rate", "rates": {old: 0.02}}
        ClockNemesis().invoke(test, nemesis_op("start-clock", rates))
    PartitionNemesis().invoke(test, nemesis_op("start-partition", {"grudge": grudge}))
    new = None
    deadline = time.monotonic() + 10
    while new is None and time.monotonic() < deadline:
        for n in others:
            m = bound(test, n).metadata()
            if m.ok and (m.raw or {}).get("role") == "LEADER":
                new = n
                break
    assert new is not None, "the majority elected no leader"
    w = bound(test, new)
    while not w.kv_put("k", 2).ok:
        assert time.monotonic() < deadline, "the new leader committed nothing"
    return old, new, c.kv_get("k", read_mode="lease")


def test_slow_leader_serves_stale_lease_read(env: Any) -> None:
    try:
        old, new, r = isolate_slow_leader(env, slow=True)
    finally:
        heal_control(env.control)
    assert r.ok and r.node == old and r.value == 1, r  # stale: 2 was committed by the new leader


def test_without_the_clock_fault_the_old_leader_refuses(env: Any) -> None:
    try:
        old, new, r = isolate_slow_leader(env, slow=False)
    finally:
        heal_control(env.control)
    assert not r.ok, r
