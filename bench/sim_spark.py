"""``chaos sim`` on Spark against local processes (issue 27, item 3): seeds/s and verdicts, one run.

Runs the same campaign (``chaos sim --seeds N``, the default swarm unless ``--sim-args`` says
otherwise) as whole ``chaos sim`` processes: ``--jobs 1``, then ``--master local[1]`` and
``--master local[2]``, with ``--jobs 2`` as the control (``--modes`` to choose). For each it prints
the process's wall time (Spark's start and stop included), seeds per wall second, the command's own
seeds/s line, the ratio to ``--jobs 1``, and the CPU seconds of the process tree (the JVM and the
Python workers included, sampled from /proc) with CPU/wall, the cores the campaign actually got; then whether the verdicts agree seed by seed: the command prints every seed that is
not valid with its verdict and reason, so equal failing-seed lines, summary and coverage lines mean
equal verdicts for every seed. ``--mutant NAME`` runs a catalogued mutant
(``chaos_dledger/mutants``) on a copy of the package first on ``PYTHONPATH`` for all modes, so the
comparison has failing seeds in it.

The issue's target: ``--master local[2]`` at least 1.6x the seeds/s of ``--jobs 1`` over 2,000
seeds on the 2-core machine. The ratio is measured in one run; absolute figures move with the
machine's load. Read the ``--jobs 2`` row first: with the kernel's autogroup scheduling
(``/proc/sys/kernel/sched_autogroup_enabled``) CPU is shared per session, so while other sessions
keep the cores busy a campaign gets about one core whatever its process count, ``--jobs 2`` runs no
faster than ``--jobs 1`` and no Spark master can either; CPU/wall shows the cores a mode got::

    python3 bench/sim_spark.py                       # 2,000 seeds: jobs 1 and 2, local[1], local[2]
    python3 bench/sim_spark.py --seeds 300           # a quick look
    python3 bench/sim_spark.py --seeds 200 --mutant vote-without-log-check --modes jobs1,local[2]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from chaos_dledger.mutants import apply_mutant, load_mutants  # noqa: E402

MODES = {"jobs1": ["--jobs", "1"], "jobs2": ["--jobs", "2"], "local[1]": ["--master", "local[1]"],
         "local[2]": ["--master", "local[2]"]}  # fmt: skip
_RATE = re.compile(r"^([\d.]+) seeds/s", re.M)
SAMPLE_S = 0.5  # how often the process tree's CPU is read (a process's last half second is missed)


def verdict_lines(stdout: str) -> list[str]:
    """What decides the verdicts: the failing seeds' lines, the summary and the coverage line (the
    seeds/s line left out)."""
    return [ln for ln in stdout.splitlines() if ln and not _RATE.match(ln)]


def tree_cpu(root: int, seen: dict[int, float]) -> None:
    """Record in ``seen`` the CPU seconds (user + system) so far of ``root`` and every process
    below it (the JVM, Spark's Python daemon and workers, a pool's workers), read from /proc; a
    process's last figure stands once it is gone."""
    tick = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(d.name)] = int(fields[1])
        cpu[int(d.name)] = (int(fields[11]) + int(fields[12])) / tick
    for pid, c in cpu.items():
        p = pid
        while p > 1 and p != root:
            p = parent.get(p, 0)
        if p == root:
            seen[pid] = max(seen.get(pid, 0.0), c)


def run_mode(
    mode: str, seeds: int, sim_args: list[str], env: dict[str, str], scratch: Path
) -> dict[str, Any]:
    """One ``chaos sim`` process in ``mode``; its wall time, CPU seconds (sampled every
    :data:`SAMPLE_S`), exit status and output."""
    cmd = [sys.executable, "-m", "chaos.cli", "sim", "--seeds", str(seeds), *sim_args, *MODES[mode],
           "--store", str(scratch / "store")]  # fmt: skip
    seen: dict[int, float] = {}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, cwd=scratch, env=env, stdout=out, stderr=err, text=True)
        while p.poll() is None:
            tree_cpu(p.pid, seen)
            time.sleep(SAMPLE_S)
        wall = time.monotonic() - t0
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    rate = _RATE.search(stdout)
    return {
        "mode": mode,
        "wall": wall,
        "cpu": sum(seen.values()),
        "exit": p.returncode,
        "command_rate": float(rate[1]) if rate else None,
        "lines": verdict_lines(stdout),
        "stderr": stderr,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=2000)
    ap.add_argument(
        "--modes", default="jobs1,jobs2,local[1],local[2]", help=f"comma-separated of {', '.join(MODES)}"
    )
    ap.add_argument("--sim-args", default="", help="more chaos sim options, e.g. '--time-limit 3'")
    ap.add_argument("--mutant", default=None, help="a catalogued mutant to run instead of the correct server")
    args = ap.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        ap.error(f"--modes {args.modes!r}: expected a comma-separated list of {', '.join(MODES)}")
    with tempfile.TemporaryDirectory(prefix="bench-sim-spark-") as tmp:
        scratch = Path(tmp)
        paths = [str(ROOT)]
        if args.mutant is not None:
            mutants = {m.name: m for m in load_mutants()}
            if args.mutant not in mutants:
                ap.error(f"--mutant {args.mutant!r}: expected one of {', '.join(sorted(mutants))}")
            paths.insert(0, str(apply_mutant(mutants[args.mutant], scratch / "mutant")))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
        load = os.getloadavg()[0]
        runs = []
        for mode in modes:
            r = run_mode(mode, args.seeds, args.sim_args.split(), env, scratch)
            runs.append(r)
            if r["exit"] not in (0, 1, 2):
                print(f"{mode}: exit {r['exit']}: {r['stderr'].strip()[-500:]}", file=sys.stderr)
            print(f"{mode}: {r['wall']:.1f} s wall, exit {r['exit']}", file=sys.stderr, flush=True)
    report(runs, args.seeds, load, os.getloadavg()[0], args.mutant)


def report(runs: list[dict[str, Any]], seeds: int, load0: float, load1: float, mutant: str | None) -> None:
    """The table of modes, the ratios to the first mode, and the agreement of verdicts."""
    base = runs[0]
    print(f"chaos sim --seeds {seeds}{f' (mutant {mutant})' if mutant else ''}; load average {load0:.1f} "
          f"before, {load1:.1f} after; {os.cpu_count()} CPUs")  # fmt: skip
    print(f"{'mode':10} {'wall s':>8} {'seeds/s':>8} {'command seeds/s':>16} {'ratio to ' + base['mode']:>16} "
          f"{'CPU s':>8} {'CPU/wall':>9}")  # fmt: skip
    for r in runs:
        rate = seeds / r["wall"]
        shown = f"{r['command_rate']:.2f}" if r["command_rate"] is not None else "-"
        print(f"{r['mode']:10} {r['wall']:8.1f} {rate:8.2f} {shown:>16} {base['wall'] / r['wall']:16.2f} "
              f"{r['cpu']:8.1f} {r['cpu'] / r['wall']:9.2f}")  # fmt: skip
    failing = sum(1 for ln in base["lines"] if ln.startswith("seed "))
    for r in runs[1:]:
        same = r["lines"] == base["lines"] and r["exit"] == base["exit"]
        print(f"verdicts of {r['mode']} vs {base['mode']}: {'agree' if same else 'DIFFER'} seed by seed "
              f"({failing} not valid in {base['mode']}, exit {base['exit']} and {r['exit']})")  # fmt: skip
        if not same:
            for a, b in zip(base["lines"], r["lines"], strict=False):
                if a != b:
                    print(f"  first difference: {a!r} vs {b!r}")
                    break


if __name__ == "__main__":
    main()
