"""Speed of `chaos sim` (issue 14): wall and CPU seconds per 60 simulated seconds, and seeds/s.

Runs SEEDS seeds of a 5-member group with 10 clients at 50 ops/s and the nemeses below, for
TIME_LIMIT simulated seconds each, in this process (no pool), once with the in-memory store and
once on the simulated disk (the real FileLogStore and currterm file over dledger.simdisk). For each
seed it prints the wall and CPU time of the simulation alone (clients, faults, the per-step safety
checks, the history file; not the checkers); then the mean per 60 simulated seconds for each store,
and the two stores' ratio. Last, the same seeds through ``run_seed`` (simulation plus the
linearizability checker, as ``chaos sim`` runs each seed) for seeds/s of one process.

The issue's target is 60 simulated seconds in under 1 s of wall time. Wall time depends on the
machine's load; CPU time is the figure to compare across runs (it still grows on a busy machine,
whose cores run slower), and the ratio between stores within one run is load-independent.

    python bench/sim.py [--seeds 5] [--time-limit 60] [--workload register] [--disk both|file|memory]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from chaos_dledger.sim import SimOptions, SimRun, run_seed

NEMESES = ["partition", "kill", "kill-leader", "pause", "clock-skew", "network", "bitflip"]
PER = 60.0  # the figure is per this many simulated seconds


def simulate(workload: str, disk: str, seeds: int, time_limit: float) -> tuple[float, float, float]:
    """Run ``seeds`` seeds on ``disk``, printing one line each; (simulated s, wall s, CPU s) in all."""
    sim_s = wall = cpu = 0.0
    with tempfile.TemporaryDirectory() as d:
        for seed in range(seeds):
            run = SimRun(
                SimOptions(workload, NEMESES, seed, time_limit, disk=disk), Path(d) / f"{seed}.jsonl"
            )
            t0, c0 = time.perf_counter(), time.process_time()
            run.run()
            dt, dc = time.perf_counter() - t0, time.process_time() - c0
            run.writer.close()
            sim_s += run.sim.now / 1000
            wall += dt
            cpu += dc
            print(
                f"{disk:6} seed {seed}: {run.sim.now / 1000:.1f} simulated s in {dt:.3f} s wall, {dc:.3f} s CPU "
                f"({run.ops} history lines, {run.sim.steps} member steps)",
                flush=True,
            )
    return sim_s, wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--time-limit", type=float, default=PER, help="simulated seconds per seed")
    ap.add_argument("--workload", choices=["register", "log"], default="register")
    ap.add_argument(
        "--disk",
        choices=["both", "file", "memory"],
        default="both",
        help="FileLogStore on the simulated disk, the in-memory store, or both (default)",
    )
    a = ap.parse_args()
    disks = ["memory", "file"] if a.disk == "both" else [a.disk]
    per_cpu: dict[str, float] = {}
    for disk in disks:
        sim_s, wall, cpu = simulate(a.workload, disk, a.seeds, a.time_limit)
        per_cpu[disk] = cpu * PER / sim_s
        print(
            f"{disk}: {wall * PER / sim_s:.2f} s wall, {cpu * PER / sim_s:.2f} s CPU per {PER:.0f} simulated s "
            f"(5 members, 10 clients; mean of {a.seeds} seeds; {sim_s / cpu:.0f} simulated s per CPU s)",
            flush=True,
        )
    if len(per_cpu) == 2:
        print(f"simulated disk / memory store: {per_cpu['file'] / per_cpu['memory']:.2f}x CPU")
    for disk in disks:
        t0, c0 = time.perf_counter(), time.process_time()
        for seed in range(a.seeds):
            run_seed(SimOptions(a.workload, NEMESES, seed, a.time_limit, disk=disk))
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        print(
            f"{disk}: with checking, {a.seeds / dt:.2f} seeds/s wall, {a.seeds / dc:.2f} per CPU s, "
            f"of {a.time_limit:.0f} simulated s each (one process; chaos sim --jobs runs one per core)"
        )


if __name__ == "__main__":
    main()
