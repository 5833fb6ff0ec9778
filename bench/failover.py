"""Kill the leader of a 3-member group N times; print the median and maximum time from the SIGKILL
to the first acknowledged append on the new leader (default server flags).

Usage: python bench/failover.py [--rounds 10] [--flush sync]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import tempfile
import time
from pathlib import Path

from dledger.bench import start_cluster, stop_cluster, wait_leader
from dledger.client import DLedgerClient


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--flush", choices=["sync", "async"], default="sync")
    ap.add_argument("--base-port", type=int, default=23911)
    ns = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="dledger-failover-"))
    peers, procs = start_cluster(root, ns.base_port, flush=ns.flush)
    times: list[float] = []
    try:
        client = DLedgerClient(peers, timeout=0.3)
        for rnd in range(ns.rounds):
            leader = wait_leader(peers)
            for k in range(20):  # warm: the leader is serving
                client.append(f"warm-{rnd}-{k}".encode())
            p = procs[leader]
            p.send_signal(signal.SIGKILL)
            t0 = time.monotonic()
            p.wait()
            while True:
                r = client.append(f"after-{rnd}".encode())
                if r.ok and r.node != leader:
                    break
            dt = time.monotonic() - t0
            times.append(dt)
            print(
                json.dumps({"round": rnd, "killed": leader, "new_leader": r.node, "seconds": round(dt, 3)}),
                flush=True,
            )
            # bring the killed member back and let it catch up before the next round
            procs.update(start_cluster_member(root, peers, leader, ns.flush))
            wait_all_up(peers, leader)
        print(
            json.dumps(
                {
                    "rounds": len(times),
                    "median_s": round(statistics.median(times), 3),
                    "max_s": round(max(times), 3),
                    "loadavg_1m": round(os.getloadavg()[0], 2),
                }
            )
        )
    finally:
        stop_cluster(procs)
        shutil.rmtree(root, ignore_errors=True)


def wait_all_up(peers: str, node: str, timeout: float = 30.0) -> None:
    """Until ``node`` runs again and follows a leader (so a quorum survives the next kill)."""
    deadline = time.monotonic() + timeout
    with DLedgerClient(peers, timeout=0.5, prefer=node) as c:
        while time.monotonic() < deadline:
            r = c.metadata()
            if r.ok and r.raw and r.raw.get("role") == "FOLLOWER" and r.raw.get("commitIndex", -1) >= 0:
                return
            time.sleep(0.05)
    raise RuntimeError(f"{node} did not rejoin")


def start_cluster_member(root: Path, peers: str, node: str, flush: str) -> dict:
    import subprocess
    import sys

    log = open(root / f"{node}.log", "ab")  # noqa: SIM115
    p = subprocess.Popen(
        [sys.executable, "-m", "dledger.cli", "server", "--id", node, "--peers", peers]
        + ["--store-dir", str(root / "store"), "--flush", flush, "--secret-file", str(root / "peer.secret")],
        stdout=log,
        stderr=log,
    )
    return {node: p}


if __name__ == "__main__":
    main()
