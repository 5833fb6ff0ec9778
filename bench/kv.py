"""KV ops/s for a 50/50 read/write mix per read mode on 3 local members.

Each of ``--concurrency`` asyncio workers keeps one KV op outstanding on the leader: a put or a get
(chosen at random, 50/50) of one of 100 keys. Prints one JSON line per read mode.

Usage: python bench/kv.py [--seconds 8] [--concurrency 32] [--modes raft-log,read-index,lease,unsafe]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import tempfile
from pathlib import Path

from dledger.bench import run_load, start_cluster, stop_cluster, wait_leader
from dledger.client import DLedgerClient
from dledger.protocol import RequestCode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--modes", default="raft-log,read-index,lease,unsafe")
    ap.add_argument("--flush", choices=["sync", "async"], default="sync")
    ap.add_argument("--base-port", type=int, default=24911)
    ns = ap.parse_args()
    for i, mode in enumerate(ns.modes.split(",")):
        root = Path(tempfile.mkdtemp(prefix="dledger-kvbench-"))
        peers, procs = start_cluster(root, ns.base_port + i, flush=ns.flush, extra=("--read-mode", mode))
        try:
            leader = wait_leader(peers)
            host, port = DLedgerClient(peers).peers[leader]
            rng = random.Random(1)

            def body(rng: random.Random = rng) -> dict:
                key = f"k{rng.randrange(100)}"
                if rng.random() < 0.5:
                    return {"op": "get", "key": key}
                return {"op": "put", "key": key, "value": rng.randrange(1000)}

            res = asyncio.run(run_load(host, port, ns.concurrency, ns.seconds, body, RequestCode.USER_DEFINE))
            res.update(read_mode=mode, flush=ns.flush, concurrency=ns.concurrency)
            res["loadavg_1m"] = round(os.getloadavg()[0], 2)
            print(json.dumps(res), flush=True)
        finally:
            stop_cluster(procs)
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
