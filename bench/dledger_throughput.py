"""Appends/s and p50/p99 latency of 1 KiB APPENDs on 3 local members, against an anchor run in turn.

Usage: python bench/dledger_throughput.py [--flush sync|async|both] [--concurrency 256]
    [--connections 16] [--client-procs 2] [--seconds 8] [--size 1024] [--pairs 3]
    [--anchor REF | --anchor DIR | --no-anchor]

``--connections N`` pipelines the ``concurrency`` outstanding appends over N connections (as
DLedger's client multiplexes over one channel; default 16); 0: one connection per outstanding append.

The machine is shared and noisy, so the figure that counts is a RATIO measured in this same run:
``--pairs`` times, the anchor server (``--anchor``: a git ref of this repository, whose ``dledger``
package is extracted with ``git archive`` into a temporary directory, or a directory holding a
``dledger`` package; default :data:`ANCHOR_REF`, main before group commit and batched pushes were
reworked for issue 38 item 4) and this tree's server are measured one after the other with the
same client load (in turn: the anchor first in even pairs, this tree first in odd ones), and the
median of the per-pair ratios (this / anchor) is printed beside both medians. Issue 38's goal is
25,000 appends/s with sync flush where the anchor measured 17,400: a ratio of at least 1.44.

Prints one JSON line per measurement (``server``: "anchor" or "this", ``pair``; same fields as
``dledger bench``) and one summary line per flush mode:
``{"flush", "anchor", "anchor_ops_per_s", "this_ops_per_s", "ratio", "ratios", "goal_ratio"}``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from dledger.bench import bench_appends

ROOT = Path(__file__).resolve().parent.parent
ANCHOR_REF = "fbac98f"
"""main before issue 38 item 4 (README: 7,700-15,100 sync appends/s at load 3.5-4.5; 17,400 idle)."""
GOAL_RATIO = round(25_000 / 17_400, 2)


def anchor_tree(anchor: str, scratch: Path) -> str:
    """A PYTHONPATH whose ``dledger`` package is the anchor's: ``anchor`` itself when it is a
    directory holding ``dledger/``, else the git ref's ``dledger/`` extracted under ``scratch``.
    Raises SystemExit naming the ref when git cannot extract it."""
    if (Path(anchor) / "dledger" / "__init__.py").is_file():
        return str(Path(anchor).resolve())
    out = scratch / "anchor"
    out.mkdir(parents=True)
    try:
        tar = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", anchor, "dledger"],
            check=True,
            capture_output=True,
        ).stdout
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"--anchor {anchor!r}: git archive failed: {e.stderr.decode().strip()}") from None
    subprocess.run(["tar", "-x", "-C", str(out)], input=tar, check=True)
    return str(out)


def measure(ns: argparse.Namespace, mode: str, port: int, pythonpath: str | None) -> dict[str, Any]:
    res = bench_appends(
        mode,
        ns.concurrency,
        ns.seconds,
        ns.size,
        port,
        ns.client_procs,
        ns.connections,
        pythonpath=pythonpath,
    )
    res["loadavg_1m"] = round(os.getloadavg()[0], 2)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--client-procs", type=int, default=2)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--base-port", type=int, default=22911)
    ap.add_argument("--flush", choices=["sync", "async", "both"], default="sync")
    ap.add_argument("--pairs", type=int, default=3, help="anchor/this pairs per flush mode")
    ap.add_argument("--anchor", default=ANCHOR_REF, help="git ref or directory of the anchor server")
    ap.add_argument("--no-anchor", action="store_true", help="measure this tree only, once per mode")
    ns = ap.parse_args()
    modes = ["async", "sync"] if ns.flush == "both" else [ns.flush]
    scratch = Path(tempfile.mkdtemp(prefix="dledger-anchor-"))
    try:
        anchor = None if ns.no_anchor else anchor_tree(ns.anchor, scratch)
        this = str(ROOT)
        port = ns.base_port
        for mode in modes:
            if anchor is None:
                print(json.dumps({"server": "this", **measure(ns, mode, port, this)}), flush=True)
                port += 1
                continue
            ratios, a_ops, t_ops = [], [], []
            for i in range(ns.pairs):
                # ABBA: the anchor first in even pairs, this tree first in odd ones (a run that
                # follows another on this disk and these cores is not in the first one's place)
                got = {}
                for who in ("anchor", "this") if i % 2 == 0 else ("this", "anchor"):
                    got[who] = measure(ns, mode, port, anchor if who == "anchor" else this)
                    print(json.dumps({"server": who, "pair": i, **got[who]}), flush=True)
                    port += 1
                a, t = got["anchor"], got["this"]
                a_ops.append(a["ops_per_s"])
                t_ops.append(t["ops_per_s"])
                ratios.append(round(t["ops_per_s"] / a["ops_per_s"], 3) if a["ops_per_s"] else float("nan"))
            summary = {
                "flush": mode,
                "anchor": ns.anchor,
                "anchor_ops_per_s": statistics.median(a_ops),
                "this_ops_per_s": statistics.median(t_ops),
                "ratio": statistics.median(ratios),
                "ratios": ratios,
                "goal_ratio": GOAL_RATIO,
            }
            print(json.dumps(summary), flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
