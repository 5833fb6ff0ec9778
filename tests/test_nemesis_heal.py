"""``chaos heal`` on real node containers: after a "crashed" control node left partitions, packet
shaping, clock skew (with a strobe loop) and a paused process behind, ``chaos heal`` removes all of
it and exits 0; a node it cannot reach is bad input, not a silent success."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from test_nemesis_support import make_test, node_cluster, reachability

from chaos.nemesis.base import nemesis_op
from chaos.nemesis.cli import residue
from chaos.nemesis.clock import ClockNemesis
from chaos.nemesis.packet import PacketNemesis
from chaos.nemesis.partition import PartitionNemesis
from chaos_dledger.db import DLedgerDB

pytestmark = [pytest.mark.docker, pytest.mark.slow]

CLUSTER = os.environ.get("CHAOS_NEMESIS_CLUSTER", "nemtest")


@pytest.fixture(scope="module")
def env() -> Iterator[Any]:
    with node_cluster(CLUSTER) as (nodes, control):
        yield make_test(nodes, control)


def test_chaos_heal_removes_every_fault(env: Any) -> None:
    control = env.control
    PartitionNemesis(["majorities-ring"]).invoke(env, nemesis_op("start-partition", "majorities-ring"))
    packet = PacketNemesis({"loss": 0.3, "rate": {"kbit": 800}})
    packet.probe(env)
    packet.invoke(env, nemesis_op("start-packet", {"behaviour": {"loss": 0.3}, "nodes": ["n1", "n2"]}))
    packet.invoke(env, nemesis_op("start-packet", {"behaviour": {"rate": {"kbit": 800}}, "nodes": ["n3"]}))
    clock = ClockNemesis()
    clock.invoke(env, nemesis_op("start-clock", {"mode": "bump", "offsets_ms": {"n4": 90_000}}))
    clock.invoke(
        env,
        nemesis_op("start-clock", {"mode": "strobe", "nodes": ["n5"], "rate": 2.0, "period_ms": 100}),
    )
    # a stopped process the pidfile does not name but the DB's kill_match does (a leftover server)
    argv0 = f"python3 {DLedgerDB.zipapp} server --standin"
    control.remote("n2").exec_raw(
        f"setsid nohup bash -c 'exec -a \"{argv0}\" sleep 600' >/dev/null 2>&1 </dev/null & "
        "echo $! > /tmp/standin.pid; sleep 0.2; kill -STOP $(cat /tmp/standin.pid)",
        sudo=True,
    )
    before = control.on_nodes(residue)
    assert all(before[n] for n in ("n1", "n2", "n3", "n4", "n5")), before
    assert any("paused process" in x for x in before["n2"])
    assert any("qdisc" in x for x in before["n3"])

    nodes = ",".join(f"{n.name}={n.host}" for n in env.nodes)
    key = env.nodes[0].key_path
    res = subprocess.run(
        # containers as ssh hosts: their fresh host keys are in no known_hosts
        ["chaos", "heal", "--provider", "ssh", "--nodes", nodes, "--ssh-private-key", key]
        + ["--no-strict-host-key-checking"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert sorted(
        line.split(":")[0] for line in lines if ": clean: nothing found after the heal" in line
    ) == [f"n{i}" for i in range(1, 6)]
    assert any(line.startswith("n2: healed: paused process") for line in lines), lines  # what, per node
    assert any(line.startswith("n1: healed: iptables chain") for line in lines), lines
    assert control.on_nodes(residue) == {n.name: [] for n in env.nodes}
    st = control.remote("n2").exec_raw("ps -o stat= -p $(cat /tmp/standin.pid)", sudo=True).stdout.strip()
    assert not st.startswith("T")
    control.remote("n2").exec_raw("kill $(cat /tmp/standin.pid); true", sudo=True)
    after = reachability(control, env.nodes, port=20990)
    assert all(after["tcp"][a][b] for a in after["tcp"] for b in after["tcp"][a])

    # the docker provider (the default) reaches the same nodes by cluster name
    res = subprocess.run(
        ["chaos", "heal", "--cluster-name", CLUSTER], capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_chaos_heal_bad_arguments() -> None:
    res = subprocess.run(
        ["chaos", "heal", "--cluster-name", "no-such-cluster-xyz"], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 254
    assert "no-such-cluster-xyz" in res.stderr
    res = subprocess.run(["chaos", "heal", "--provider", "ssh"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 254 and "--nodes" in res.stderr


def _heal(*args: str) -> subprocess.CompletedProcess[str]:
    import sys

    cmd = [sys.executable, "-m", "chaos.cli", "heal", "--cluster-name", CLUSTER, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def test_chaos_heal_removes_a_drop_rule_added_by_hand(env: Any) -> None:
    """Issue 35 item 2: ``iptables -A INPUT -s <peer> -j DROP`` added by hand on n3 was "clean"
    to ``chaos heal`` and stayed. Now heal deletes it and a shaping qdiscs it did not create, as
    Jepsen's net/heal! does, and leaves other rules; ``--keep-foreign-rules`` lists them and
    calls the node not clean; "clean" names the network among what it checked."""
    n1, n3 = env.nodes[0], env.control.remote("n3")
    drop = f"-A INPUT -s {n1.host}/32 -j DROP"
    n3.exec_raw(f"iptables -w {drop}; iptables -w -A INPUT -s {n1.host}/32 -p udp -j ACCEPT", sudo=True)
    n3.exec_raw("tc qdisc add dev eth0 root tbf rate 1mbit burst 32kbit latency 400ms", sudo=True)
    try:
        kept = _heal("--keep-foreign-rules")
        assert kept.returncode == 255, kept.stdout + kept.stderr
        assert f"n3: still present: iptables rule not created by chaos: {drop}" in kept.stdout
        assert "n3: still present: qdisc not created by chaos on eth0: tbf" in kept.stdout
        assert "n3: not clean: 2 left after the heal" in kept.stdout
        assert drop in n3.exec_raw("iptables -w -S INPUT", sudo=True).stdout

        res = _heal()
        assert res.returncode == 0, res.stdout + res.stderr
        lines = res.stdout.splitlines()
        assert f"n3: healed: iptables rule not created by chaos: {drop}" in lines
        assert any(ln.startswith("n3: healed: qdisc not created by chaos on eth0: tbf") for ln in lines)
        clean = [ln for ln in lines if ": clean: nothing found after the heal" in ln]
        assert len(clean) == 5 and all("network (iptables/ip6tables DROP and REJECT" in ln for ln in clean)
        rules = n3.exec_raw("iptables -w -S INPUT", sudo=True).stdout
        assert drop not in rules and "-p udp -j ACCEPT" in rules  # what is not a drop stays
        assert "tbf" not in n3.exec_raw("tc qdisc show dev eth0", sudo=True).stdout
        after = reachability(env.control, env.nodes, port=20990)
        assert all(after["tcp"][a][b] for a in after["tcp"] for b in after["tcp"][a])
    finally:
        n3.exec_raw(
            f"iptables -w -D INPUT -s {n1.host}/32 -j DROP; iptables -w -D INPUT -s {n1.host}/32 -p udp "
            "-j ACCEPT; tc qdisc del dev eth0 root; true",
            sudo=True,
        )


def test_chaos_heal_respects_a_live_runs_cluster_lock(env: Any) -> None:
    """Issue 35 item 2: heal undoes a run's faults, so a live run's cluster lock refuses it (254,
    naming the run) as it refuses a second ``chaos run``; ``--force`` heals anyway and says so.
    A heal takes the lock itself, and leaves none behind."""
    from chaos.cluster.lock import LOCK_PATH, ClusterLock

    lock = ClusterLock(env.control, "register-live", "/tmp/store-live")
    lock.acquire()
    try:
        res = _heal()
        assert res.returncode == 254, res.stdout + res.stderr
        assert res.stdout == "" and len(res.stderr.splitlines()) == 1
        assert "in use by run register-live" in res.stderr and "pass --force" in res.stderr
        forced = _heal("--force")
        assert forced.returncode == 0, forced.stdout + forced.stderr
        assert "--force: healing n1, n2, n3, n4, n5 while run register-live" in forced.stderr
    finally:
        lock.release()
    res = _heal()
    assert res.returncode == 0, res.stdout + res.stderr
    left = env.control.on_nodes(lambda r: r.exec_raw(f"cat {LOCK_PATH} 2>/dev/null; true", sudo=True).stdout)
    assert all(not text.strip() for text in left.values()), left
