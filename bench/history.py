"""Benchmark of the history store and the streaming checkers; prints its figures.

    python bench/history.py [--ops N]

Figures are given per wall-clock second and per CPU second of this process (the checkers are
single-threaded, so on an idle machine the two agree; on a shared one the CPU figure is the
machine-independent one).

Writes a log-workload history of N ops (default 1,000,000: appends by 10 processes plus a final
read per node, with kill faults) with HistoryWriter, reads it back with read_history (validating),
then runs the log, stats and perf checkers in one streaming pass. Prints ops/s for each and the
peak traced memory of the checking pass.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chaos.history.checkers.logcheck import LogChecker  # noqa: E402
from chaos.history.checkers.perf import PerfChecker  # noqa: E402
from chaos.history.checkers.registry import StatsChecker, compose  # noqa: E402
from chaos.history.op import Op  # noqa: E402
from chaos.history.store import HistoryWriter, read_history  # noqa: E402

MS = 1_000_000


class Timer:
    """Wall and CPU seconds of a block."""

    def __enter__(self) -> Timer:
        self.w0, self.c0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.w0
        self.cpu = time.process_time() - self.c0

    def rate(self, n: int) -> str:
        return f"{n / self.wall:,.0f} ops/s wall ({self.wall:.2f} s), {n / self.cpu:,.0f} ops/s CPU ({self.cpu:.2f} s)"


def log_ops(n_ops: int, *, processes: int = 10, nodes: int = 3, seed: int = 1) -> Iterator[Op]:
    """A valid log-workload history of about ``n_ops`` ops (appends, kill faults, final reads).

    Each process runs appends back to back; every 1000 appends a kill fault starts or stops. Indexes
    are consecutive, so the final log holds every ok and info append in completion order.
    """
    rng = random.Random(seed)
    t = 0
    log: list[int | None] = [None]
    open_: dict[int, tuple[int, int]] = {}
    v = 0
    n = 0
    kill = False
    while n < n_ops - 2 * nodes - 2:
        p = rng.randrange(processes)
        t += rng.randrange(1, 200_000)
        if p in open_:
            val, _ = open_.pop(p)
            kind = "ok" if rng.random() > 0.01 else "fail"
            if kind == "ok":
                yield Op("ok", p, "append", val, time=t, extra={"log_index": len(log)})
                log.append(val)
            else:
                yield Op("fail", p, "append", val, time=t, error="not leader")
        else:
            open_[p] = (v, t)
            yield Op("invoke", p, "append", v, time=t, node=f"n{p % nodes + 1}")
            v += 1
        n += 1
        if v and v % 1000 == 0 and p not in open_:
            kill = not kill
            f = "start-kill" if kill else "stop-kill"
            yield Op("info", "nemesis", f, {"nodes": ["n1"]}, time=t)
            t += 5 * MS
            yield Op("info", "nemesis", f, {"nodes": ["n1"]}, time=t)
            n += 2
    for p, (val, _) in sorted(open_.items()):
        t += 1000
        yield Op("info", p, "append", val, time=t, error="timeout")
    for i in range(nodes):
        t += MS
        yield Op("invoke", 1000 + i, "read", None, time=t, node=f"n{i + 1}")
        t += MS
        yield Op("ok", 1000 + i, "read", log, time=t, node=f"n{i + 1}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=1_000_000, help="history size in ops")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "history.jsonl"
        ops = list(log_ops(args.ops))
        n = len(ops)
        w = HistoryWriter(path)
        with Timer() as tm:
            for op in ops:
                w.write(op)
        w.close()
        del ops
        print(f"writer: {n} ops, {path.stat().st_size / 1e6:.1f} MB: {tm.rate(n)}")

        with Timer() as tm:
            count = sum(1 for _ in read_history(path))
        print(f"reader (validating): {tm.rate(count)}")

        with Timer() as tm:
            count = sum(1 for _ in read_history(path, validate=False))
        print(f"reader (no validation): {tm.rate(count)}")

        checker = compose([LogChecker(), StatsChecker(), PerfChecker()])
        with Timer() as tm:
            r = checker.check({"workload": "log"}, path, {})
        print(f"log+stats+perf checkers, one pass: {tm.rate(count)}, valid={r['valid']}")

        tracemalloc.start()
        checker.check({"workload": "log"}, path, {})
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(f"checking pass peak traced memory: {peak / 1e6:.1f} MB for {count} ops")
    print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
