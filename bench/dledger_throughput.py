"""Appends/s and p50/p99 latency of 1 KiB APPENDs on 3 local members, for --flush sync and async.

Usage: python bench/dledger_throughput.py [--concurrency 256] [--connections 0] [--client-procs 2]
    [--seconds 10] [--size 1024] [--flush both|sync|async]
``--connections N`` pipelines the ``concurrency`` outstanding appends over N connections (as
DLedger's client multiplexes over one channel); 0 (default): one connection per outstanding append.
Prints one JSON line per flush mode (same as ``dledger bench``).
"""

from __future__ import annotations

import argparse
import json
import os

from dledger.bench import bench_appends


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--client-procs", type=int, default=2)
    ap.add_argument("--connections", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--base-port", type=int, default=22911)
    ap.add_argument("--flush", choices=["sync", "async", "both"], default="both")
    ns = ap.parse_args()
    modes = ["async", "sync"] if ns.flush == "both" else [ns.flush]
    for i, mode in enumerate(modes):
        res = bench_appends(
            mode, ns.concurrency, ns.seconds, ns.size, ns.base_port + i, ns.client_procs, ns.connections
        )
        res["loadavg_1m"] = round(os.getloadavg()[0], 2)
        print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
