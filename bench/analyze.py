"""Times `chaos analyze` on Spark against checking the same runs in one Python process.

Generates RUNS synthetic register runs (OPS register ops over KEYS keys in all, with overlap and
some injected violations), then prints the seconds for the Spark pipeline (split into Spark
start-up, checking, statistics and Parquet on the executors, and the driver's merge and summary)
and for `chaos check` of each run in one process, and whether both found exactly the injected
violations.

    python bench/analyze.py [--runs 100] [--ops 1000000] [--keys 1000] [--master local[2]]
        [--no-ops-parquet]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from chaos.history.checkers.linear import check_history
from chaos.history.spark.pipeline import analyze
from chaos.history.spark.tasks import run_id
from chaos.history.store import read_history
from chaos.history.synth import register_history, write_run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--ops", type=int, default=1_000_000, help="register ops over all runs")
    ap.add_argument("--keys", type=int, default=1000, help="keys over all runs")
    ap.add_argument("--violations-every", type=int, default=10, help="one violated key every N runs")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--keep", action="store_true", help="keep the generated runs")
    ap.add_argument(
        "--no-ops-parquet", action="store_true", help="write no history.parquet (analyze(ops_parquet=False))"
    )
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="chaos-bench-analyze-"))
    store = tmp / "store"
    expected: dict[str, list[str]] = {}
    dirs = []
    t = time.monotonic()
    for i in range(args.runs):
        n_viol = 1 if i % args.violations_every == 0 else 0
        ops, violated = register_history(
            args.ops // args.runs,
            keys=max(args.keys // args.runs, 1),
            processes=10,
            seed=i,
            violations=n_viol,
        )
        run_dir = write_run(store, "register-synth", f"run{i:04d}", ops)
        dirs.append(run_dir)
        expected[run_id(run_dir)] = sorted(str(k) for k in violated)
    print(f"generated {args.runs} runs, {args.ops} ops, {args.keys} keys in {time.monotonic() - t:.1f} s")

    t = time.monotonic()
    summary = analyze(dirs, master=args.master, out=tmp / "analysis", ops_parquet=not args.no_ops_parquet)
    spark_total = time.monotonic() - t
    timings = summary["timings"]
    found = {r: sorted(v["checkers"]["linear"]["failures"]) for r, v in summary["verdicts"].items()}
    print(
        f"spark ({args.master}): {spark_total:.1f} s total = start-up {timings['spark_start']:.1f} s"
        f" + every checker, the statistics and the Parquet on the executors"
        f" {timings['check_and_write_on_executors']:.1f} s + merge and summary {timings['summary']:.1f} s"
    )
    print(f"spark found exactly the injected violations: {found == expected}")

    t = time.monotonic()
    local = {}
    for run_dir in dirs:
        res = check_history(read_history(run_dir / "history.jsonl"), "cas-register", workers=1)
        local[run_id(run_dir)] = sorted(res["failures"])
    loop_total = time.monotonic() - t
    print(f"one python process: {loop_total:.1f} s")
    print(f"one process found exactly the injected violations: {local == expected}")
    print(
        f"ratio: one process / spark ({args.master}), {args.runs} runs / {args.ops} ops: "
        f"{loop_total / spark_total:.2f}x (goal >= 1.0x; Spark started in this process, its start-up "
        "included; bench/scale.py times the whole commands)"
    )
    if not args.keep:
        shutil.rmtree(tmp)
    else:
        print(f"runs kept in {tmp}")


if __name__ == "__main__":
    main()
