"""Benchmark of the DLedger file store (dledger.store.file.FileLogStore).

Prints appends/s for 1 KiB bodies without sync and with sync() every N entries (group commit as
the server does it), uncached get/s, and the recovery time for reopening the store.

    python bench/store.py [--entries 50000] [--body 1024] [--sync-every 100] [--dir /tmp/x]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from dledger.store import Entry
from dledger.store.file import FileLogStore


def run(directory: Path, n: int, body: bytes, sync_every: int) -> float:
    shutil.rmtree(directory, ignore_errors=True)
    s = FileLogStore(directory)
    t = time.perf_counter()
    for i in range(n):
        s.append(Entry(i, 1, body))
        if sync_every and (i + 1) % sync_every == 0:
            s.sync()
    s.sync()
    rate = n / (time.perf_counter() - t)
    s.close()
    return rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--entries", type=int, default=50_000)
    ap.add_argument("--body", type=int, default=1024, help="body bytes")
    ap.add_argument("--sync-every", type=int, default=100)
    ap.add_argument("--dir", type=Path, default=None, help="store directory (default: a temp dir)")
    a = ap.parse_args()
    base = a.dir or Path(tempfile.mkdtemp(prefix="store-bench-"))
    # Calibration: the machine is shared, so print how fast plain Python runs right now.
    t = time.perf_counter()
    x = 0
    for i in range(1_000_000):
        x += i
    load = os.getloadavg()[0]
    print(f"calibration: {1e3 * (time.perf_counter() - t):.0f} ms per 1M-iteration loop, load {load:.1f}")
    body = b"x" * a.body
    try:
        d = base / "store"
        nosync = run(d, a.entries, body, 0)
        print(
            f"append, no sync:              {nosync:10,.0f} appends/s ({a.body} B bodies, {a.entries} entries)"
        )
        synced = run(d, a.entries, body, a.sync_every)
        print(f"append, sync every {a.sync_every:4d}:      {synced:10,.0f} appends/s")
        one = run(d, min(a.entries, 2000), body, 1)
        print(f"append, sync every entry:     {one:10,.0f} appends/s (2000 entries)")
        run(d, a.entries, body, 0)
        t = time.perf_counter()
        s = FileLogStore(d, cache_entries=0)
        rec = time.perf_counter() - t
        print(
            f"recovery (full CRC check):    {rec:10.3f} s for {s.end_index + 1} entries "
            f"({(s.end_index + 1) / rec:,.0f} entries/s)"
        )
        t = time.perf_counter()
        for i in range(0, s.end_index + 1):
            s.get(i)
        print(f"get from disk (uncached):     {(s.end_index + 1) / (time.perf_counter() - t):10,.0f} gets/s")
        s.close()
    finally:
        if a.dir is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
