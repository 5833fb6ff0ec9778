"""Nemesis latency on a real docker cluster: how long injecting and healing each fault takes.

Usage: ``python bench/nemesis.py [--cluster-name NAME] [--rounds N]``. Brings the named cluster up
(reused when running) and prints, per fault, the median and max wall time of the start and stop ops
over N rounds, plus the time of a full heal (what ``chaos heal`` does) on every node. No DB needed.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import shlex
import statistics
import time
from types import SimpleNamespace
from typing import Any

from chaos.nemesis.base import nemesis_op
from chaos.nemesis.cli import heal_control
from chaos.nemesis.clock import ClockNemesis
from chaos.nemesis.packet import PacketNemesis
from chaos.nemesis.partition import PartitionNemesis


def timed(fn: Any, *args: Any) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cluster-name", default="nemtest")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    from chaos.cluster.docker import DockerProvider
    from chaos.control.db import build_db
    from chaos.control.ssh import Control

    nodes = DockerProvider(5, name=args.cluster_name).up()
    control = Control(nodes)
    # the clock fault works through the DB's clock capability (its libfaketime offset file and
    # pidfile): the default DB's paths, with no server running (nothing to signal)
    db = build_db(None)
    offsets_dir = os.path.dirname(str(db.faketime_file))
    control.on_nodes(lambda r: r.exec_raw(f"mkdir -p {shlex.quote(offsets_dir)}", sudo=True))
    test = SimpleNamespace(
        nodes=nodes, control=control, db=db, rng=random.Random(1), opts={}, log=logging.getLogger("bench")
    )
    faults: list[tuple[str, Any, Any, Any]] = [
        (
            "partition majorities-ring",
            PartitionNemesis(["majorities-ring"]),
            "start-partition",
            "majorities-ring",
        ),
        (
            "clock bump (all nodes)",
            ClockNemesis(),
            "start-clock",
            {"mode": "bump", "offsets_ms": {n.name: 60_000 for n in nodes}},
        ),
        (
            "packet loss (all, iptables)",
            PacketNemesis({"loss": 0.2}),
            "start-packet",
            {"behaviour": {"loss": 0.2}, "nodes": [n.name for n in nodes]},
        ),
        (
            "packet rate (all, htb)",
            PacketNemesis({"rate": {"kbit": 1000}}),
            "start-packet",
            {"behaviour": {"rate": {"kbit": 1000}}, "nodes": [n.name for n in nodes]},
        ),
    ]
    try:
        heal_control(control)
        print(f"{'fault':<30} {'start med':>10} {'start max':>10} {'stop med':>10} {'stop max':>10}")
        for name, nem, f, value in faults:
            if isinstance(nem, PacketNemesis):
                nem.probe(test)
            starts, stops = [], []
            for _ in range(args.rounds):
                starts.append(timed(nem.invoke, test, nemesis_op(f, value)))
                stops.append(timed(nem.invoke, test, nemesis_op(f.replace("start", "stop"))))
            print(
                f"{name:<30} {statistics.median(starts):>9.3f}s {max(starts):>9.3f}s "
                f"{statistics.median(stops):>9.3f}s {max(stops):>9.3f}s"
            )
        heals = [timed(heal_control, control) for _ in range(args.rounds)]
        print(f"{'full heal + residue check':<30} {statistics.median(heals):>9.3f}s {max(heals):>9.3f}s")
    finally:
        heal_control(control)
        control.close()


if __name__ == "__main__":
    main()
