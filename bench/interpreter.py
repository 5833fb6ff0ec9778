"""Interpreter throughput: a no-op client driven through the generator and the history writer.

Prints ops/s (completed client ops per second of wall time). Target: >= 20,000 ops/s (Jepsen's
generator claims more than 20,000). The machine may be shared, so it also prints the process's CPU
time (user + system, all threads) and ops per CPU-second, the figure that does not depend on how much
of the machine other processes take, with the load average and context switches during the run.
Usage: python bench/interpreter.py [--ops N] [--concurrency C] [--repeat R]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # measure this checkout's code

from chaos.control import generator as gen  # noqa: E402
from chaos.control.interpreter import Interpreter  # noqa: E402
from chaos.history.op import OK, Op  # noqa: E402
from chaos.history.store import HistoryWriter, read_history  # noqa: E402


class NoopClient:
    def open(self, test: Any, node: str) -> NoopClient:
        return self

    def invoke(self, test: Any, op: Op) -> Op:
        return op.completion(OK, op.value)

    def close(self, test: Any) -> None:
        pass


def run_once(ops: int, concurrency: int) -> dict[str, float]:
    """One run; returns wall s, CPU s, context switches and the history's line count."""
    g = gen.clients(
        gen.limit(
            ops,
            gen.mix(
                [
                    gen.repeat({"f": "read"}),
                    gen.repeat({"f": "write", "value": 1}),
                    gen.repeat({"f": "cas", "value": [1, 2]}),
                ]
            ),
        )
    )
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "history.jsonl"
        w = HistoryWriter(path)
        it = Interpreter(
            None,
            client=NoopClient(),
            nemesis=None,
            nodes=["n1", "n2", "n3", "n4", "n5"],
            concurrency=concurrency,
            history=w,
            rng=random.Random(1),
        )
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        it.run(g)
        dt = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        w.close()
        n = sum(1 for _ in read_history(path))
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return {
        "wall": dt,
        "cpu": cpu,
        "sys": r1.ru_stime - r0.ru_stime,
        "csw": (r1.ru_nvcsw - r0.ru_nvcsw) + (r1.ru_nivcsw - r0.ru_nivcsw),
        "lines": n,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ops", type=int, default=200_000)
    ap.add_argument("--concurrency", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3, help="runs; the best is reported too")
    args = ap.parse_args()
    best_wall = best_cpu = 0.0
    for i in range(args.repeat):
        load = os.getloadavg()[0]
        r = run_once(args.ops, args.concurrency)
        wall_rate, cpu_rate = args.ops / r["wall"], args.ops / r["cpu"]
        best_wall, best_cpu = max(best_wall, wall_rate), max(best_cpu, cpu_rate)
        print(
            f"interpreter run {i + 1}: {args.ops} ops ({r['lines']:.0f} history lines), concurrency "
            f"{args.concurrency}: {r['wall']:.2f} s wall, {r['cpu']:.2f} s CPU ({r['sys']:.2f} s system), "
            f"{r['csw'] / args.ops:.2f} context switches/op, load average {load:.2f} (2-core machine: "
            f"{os.cpu_count()} CPUs)"
        )
        print(f"interpreter run {i + 1}: {wall_rate:,.0f} ops/s wall, {cpu_rate:,.0f} ops/CPU-s")
    print(
        f"interpreter: best {best_wall:,.0f} ops/s wall, best {best_cpu:,.0f} ops/CPU-s "
        f"(target >= 20,000 ops/s), load average now {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
