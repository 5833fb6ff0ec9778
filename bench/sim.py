"""Speed of `chaos sim`: simulated seconds per wall second and seeds per second.

Runs SEEDS seeds of a 5-member group with 10 clients at 50 ops/s and every nemesis, for TIME_LIMIT
simulated seconds each, in this process (no pool, no checking), and prints for each seed the wall
time of the simulation; then the same seeds through `run_seed` (simulation plus the checkers) for
seeds/s. CPU seconds are printed beside wall seconds because wall figures depend on the machine's load; the issue's target is 60 simulated seconds in under
1 s of wall time.

    python bench/sim.py [--seeds 5] [--time-limit 60] [--workload register] [--disk file|memory]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from chaos.sim import SimOptions, SimRun, run_seed

FAULTS = ["partition", "kill", "kill-leader", "pause", "clock-skew", "network", "bitflip"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--time-limit", type=float, default=60.0, help="simulated seconds per seed")
    ap.add_argument("--workload", choices=["register", "log"], default="register")
    ap.add_argument(
        "--disk", choices=["file", "memory"], default="file", help="FileLogStore on SimDisk, or memory"
    )
    a = ap.parse_args()
    sim_s = wall = cpu = 0.0
    with tempfile.TemporaryDirectory() as d:
        for seed in range(a.seeds):
            run = SimRun(
                SimOptions(a.workload, FAULTS, seed, a.time_limit, disk=a.disk), Path(d) / f"{seed}.jsonl"
            )
            t0, c0 = time.perf_counter(), time.process_time()
            run.run()
            dt, dc = time.perf_counter() - t0, time.process_time() - c0
            run.writer.close()
            sim_s += run.sim.now / 1000
            wall += dt
            cpu += dc
            print(
                f"seed {seed}: {run.sim.now / 1000:.1f} simulated s in {dt:.3f} s wall, {dc:.3f} s CPU "
                f"({run.ops} history lines, {run.sim.steps} member steps)"
            )
    print(f"simulation only: {sim_s / wall:.1f} simulated s per wall s, {sim_s / cpu:.1f} per CPU s")
    t0 = time.perf_counter()
    for seed in range(a.seeds):
        run_seed(SimOptions(a.workload, FAULTS, seed, a.time_limit, disk=a.disk))
    dt = time.perf_counter() - t0
    print(f"with checking: {a.seeds / dt:.2f} seeds/s of {a.time_limit:.0f} simulated s (one process)")


if __name__ == "__main__":
    main()
