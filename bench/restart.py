"""Restart-to-serving time of a SIGKILLed follower holding N entries.

Writes N appends to a 3-member group, SIGKILLs a follower, starts it again and measures the seconds
from the start until it answers METADATA with appliedIndex >= the commitIndex it had before the
kill (store recovered, state machine rebuilt, serving). Also prints the store recovery time the
server logged. Prints one JSON line per round and a summary line.

Local members (127.0.0.x, store in a temp dir):
    python bench/restart.py [--entries 5000] [--rounds 3] [--size 100] [--snapshot-every N]
Docker nodes of a `chaos cluster up --cluster-name NAME` cluster (deploys the current source):
    python bench/restart.py --docker NAME [--entries 5000]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dledger.bench import start_cluster, stop_cluster, wait_leader
from dledger.client import DLedgerClient

_RECOVERED = re.compile(r"checked in \d+ data files in ([0-9.]+)s")


def write_entries(peers: str, n: int, size: int, group: str, threads: int = 16) -> int:
    """Append ``n`` bodies of ``size`` bytes from ``threads`` clients; return the count acknowledged."""
    ok = [0]
    lock = threading.Lock()

    def worker(k: int) -> None:
        with DLedgerClient(peers, timeout=2.0, group=group) as c:
            for i in range(k):
                if c.append(b"%d-" % i + b"x" * max(0, size - 8)).ok:
                    with lock:
                        ok[0] += 1

    per = [n // threads + (1 if i < n % threads else 0) for i in range(threads)]
    ts = [threading.Thread(target=worker, args=(k,)) for k in per]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return ok[0]


def wait_serving(peers: str, node: str, applied: int, group: str, timeout: float = 60.0) -> float:
    """Seconds until ``node`` answers METADATA with appliedIndex >= ``applied``."""
    t0 = time.monotonic()
    with DLedgerClient(peers, timeout=0.2, group=group, prefer=node) as c:
        while time.monotonic() - t0 < timeout:
            r = c.metadata()
            if r.ok and r.node == node and r.raw and r.raw.get("appliedIndex", -1) >= applied:
                return time.monotonic() - t0
            time.sleep(0.005)
    raise RuntimeError(f"{node} not serving {timeout}s after the restart")


def meta(peers: str, node: str, group: str) -> dict[str, Any]:
    with DLedgerClient(peers, timeout=1.0, group=group, prefer=node) as c:
        r = c.metadata()
    if not r.ok or r.raw is None or r.node != node:
        raise RuntimeError(f"metadata of {node}: {r}")
    return r.raw


def rounds(
    ns: argparse.Namespace,
    peers: str,
    group: str,
    kill: Callable[[str], None],
    start: Callable[[str], None],
    recovery_seconds: Callable[[str], float | None],
) -> None:
    t = time.monotonic()
    acked = write_entries(peers, ns.entries, ns.size, group)
    print(json.dumps({"written": acked, "seconds": round(time.monotonic() - t, 2)}), flush=True)
    times: list[float] = []
    for rnd in range(ns.rounds):
        with DLedgerClient(peers, timeout=1.0, group=group) as c:
            leader = c.metadata().leader_id
        victim = next(n for n in ns.members if n != leader)
        before = meta(peers, victim, group)
        kill(victim)
        t0 = time.monotonic()
        start(victim)
        wait_serving(peers, victim, before["commitIndex"], group)
        dt = time.monotonic() - t0
        times.append(dt)
        print(
            json.dumps(
                {
                    "round": rnd,
                    "node": victim,
                    "entries": before["ledgerEndIndex"] + 1,
                    "restart_to_serving_s": round(dt, 3),
                    "store_recovery_s": recovery_seconds(victim),
                }
            ),
            flush=True,
        )
    print(
        json.dumps(
            {
                "entries": ns.entries,
                "rounds": len(times),
                "median_s": round(statistics.median(times), 3),
                "max_s": round(max(times), 3),
                "loadavg_1m": round(os.getloadavg()[0], 2),
            }
        ),
        flush=True,
    )


def run_local(ns: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="dledger-restart-"))
    extra: tuple[str, ...] = ("--snapshot-every", str(ns.snapshot_every)) if ns.snapshot_every else ()
    peers, procs = start_cluster(root, ns.base_port, flush="sync", extra=extra)
    ns.members = list(procs)

    def kill(node: str) -> None:
        procs[node].send_signal(signal.SIGKILL)
        procs[node].wait()

    def start(node: str) -> None:
        log = open(root / f"{node}.log", "ab")  # noqa: SIM115
        procs[node] = subprocess.Popen(
            [sys.executable, "-m", "dledger.cli", "server", "--id", node, "--peers", peers]
            + [
                "--store-dir",
                str(root / "store"),
                "--flush",
                "sync",
                "--secret-file",
                str(root / "peer.secret"),
            ]
            + list(extra),
            stdout=log,
            stderr=log,
        )

    def recovery(node: str) -> float | None:
        found = _RECOVERED.findall((root / f"{node}.log").read_text(errors="replace"))
        return float(found[-1]) if found else None

    try:
        wait_leader(peers)
        rounds(ns, peers, "default", kill, start, recovery)
    finally:
        stop_cluster(procs)
        if os.environ.get("KEEP"):
            print(root)
        else:
            shutil.rmtree(root, ignore_errors=True)


def run_docker(ns: argparse.Namespace) -> None:
    from chaos.cluster.docker import load_nodes
    from chaos.control.ssh import Control
    from chaos_dledger.db import DLedgerDB

    nodes = load_nodes(ns.docker)[:3]
    control = Control(nodes)
    args = ["--snapshot-every", str(ns.snapshot_every)] if ns.snapshot_every else []
    db = DLedgerDB(flush="sync", server_args=args)
    try:
        t = time.monotonic()
        db.setup(control)
        print(json.dumps({"setup_s": round(time.monotonic() - t, 2)}), flush=True)
        peers = db.client_peers(nodes)
        ns.members = [n.name for n in nodes]

        def recovery(node: str) -> float | None:
            out = control.remote(node).exec_raw(f"grep 'checked in' {db.log_file} | tail -n1", check=False)
            found = _RECOVERED.findall(out.stdout)
            return float(found[-1]) if found else None

        rounds(
            ns,
            peers,
            db.group,
            lambda n: db.kill(control.remote(n)),
            lambda n: db.start(control.remote(n)),
            recovery,
        )
    finally:
        if not os.environ.get("KEEP"):
            db.teardown(control)
        control.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=int, default=100, help="body bytes")
    ap.add_argument("--snapshot-every", type=int, default=0)
    ap.add_argument("--base-port", type=int, default=24911)
    ap.add_argument("--docker", metavar="NAME", help="use the docker cluster NAME (chaos cluster up)")
    ns = ap.parse_args()
    if ns.entries < 1 or ns.rounds < 1:
        ap.error("--entries and --rounds: expected >= 1")
    if ns.docker:
        run_docker(ns)
    else:
        run_local(ns)


if __name__ == "__main__":
    main()
