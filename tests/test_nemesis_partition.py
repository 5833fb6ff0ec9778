"""Partitions on real node containers: each shape gives exactly the intended reachability matrix,
measured by sending UDP datagrams (one direction) and TCP connects (both directions) between
every pair on the DB port; heal restores full reachability and leaves no rule of the tool."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from typing import Any

import pytest
from test_nemesis_support import make_test, node_cluster, reachability

from chaos.history.op import Op
from chaos.nemesis.base import nemesis_op
from chaos.nemesis.cli import heal_control, residue
from chaos.nemesis.partition import PartitionNemesis, expected_connect, expected_delivery, visible

pytestmark = [pytest.mark.docker, pytest.mark.slow]

CLUSTER = os.environ.get("CHAOS_NEMESIS_CLUSTER", "nemtest")


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[list[Any], Any]]:
    with node_cluster(CLUSTER, heal_after=True) as nc:
        yield nc


def assert_matrix(measured: dict[str, Any], grudge: dict[str, list[str]]) -> None:
    want_udp = expected_delivery(grudge)
    want_tcp = expected_connect(grudge)
    for a, b in itertools.permutations(sorted(grudge), 2):
        got = measured["udp"][a][b] > 0
        assert got == want_udp[a][b], f"udp {a}->{b}: got {got}, grudge {grudge}"
        assert measured["tcp"][a][b] == want_tcp[a][b], f"tcp {a}->{b}, grudge {grudge}"


@pytest.mark.parametrize("shape", ["majorities-ring", "random-halves", "random-node", "bridge", "asymmetric"])
def test_partition_shape_reachability(cluster: tuple[list[Any], Any], shape: str) -> None:
    nodes, control = cluster
    test = make_test(nodes, control, seed=sum(map(ord, shape)))
    nem = PartitionNemesis([shape])
    nem.setup(test)
    try:
        before = reachability(control, nodes)
        assert all(v > 0 for d in before["udp"].values() for v in d.values())
        done = nem.invoke(test, nemesis_op("start-partition", shape))
        assert done.type == "info" and done.process == "nemesis"
        grudge = done.value["grudge"]
        assert done.value["shape"] == shape and done.value["applied"] is True
        assert any(grudge.values())
        assert_matrix(reachability(control, nodes), grudge)
        if shape == "majorities-ring":
            views = {frozenset(visible(grudge, n)) for n in grudge}
            assert len(views) == 5 and all(len(v) == 3 for v in views)
        # the control node keeps its SSH link throughout
        assert all(control.on_nodes(lambda r: r.exec("true").exit_code == 0).values())
        stop = nem.invoke(test, nemesis_op("stop-partition"))
        assert stop.value == {"healed": [n.name for n in nodes], "applied": True}
        after = reachability(control, nodes)
        assert all(after["tcp"][a][b] for a in after["tcp"] for b in after["tcp"][a])
        assert all(v > 0 for d in after["udp"].values() for v in d.values())
        assert control.on_nodes(residue) == {n.name: [] for n in nodes}
    finally:
        nem.heal(test)


def test_explicit_grudge_replays_and_heal_spares_other_rules(cluster: tuple[list[Any], Any]) -> None:
    nodes, control = cluster
    test = make_test(nodes, control)
    n1 = control.remote("n1")
    # a rule that is not the tool's: heal must leave it alone
    n1.exec_raw("iptables -w -A INPUT -s 192.0.2.77 -j DROP", sudo=True)
    nem = PartitionNemesis()
    try:
        grudge = {"n1": ["n2"], "n2": [], "n3": [], "n4": [], "n5": []}
        done = nem.invoke(test, Op("info", "nemesis", "start-partition", {"grudge": grudge}))
        assert done.value["grudge"] == grudge
        assert_matrix(reachability(control, nodes), grudge)
        left = heal_control(control)
        assert left == {n.name: [] for n in nodes}
        assert "192.0.2.77" in n1.exec_raw("iptables -w -S INPUT", sudo=True).stdout
    finally:
        n1.exec_raw("iptables -w -D INPUT -s 192.0.2.77 -j DROP", sudo=True, check=False)
        nem.heal(test)


def test_bad_partition_value(cluster: tuple[list[Any], Any]) -> None:
    nodes, control = cluster
    nem = PartitionNemesis()
    test = make_test(nodes, control)
    with pytest.raises(ValueError, match="unknown nodes"):
        nem.invoke(test, nemesis_op("start-partition", {"grudge": {"n9": []}}))
    with pytest.raises(ValueError, match="expected a shape"):
        nem.invoke(test, nemesis_op("start-partition", "triangle"))
