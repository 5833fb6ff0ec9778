"""Scale of `chaos check` and `chaos analyze` (issue 27): ratios measured side by side in one run.

Every figure that matters is a RATIO of two things timed in turn in this same run (A B A B ...,
the median of the per-pair ratios), so a shared, loaded machine moves both sides alike.

1. `chaos check` on a synthetic register history (100k ops / 100 keys, 1M ops / 1,000 keys):
   the whole process (`chaos check --workers 1 FILE`, start-up, parse, every checker, summary)
   against the linearizability search alone on the same parsed ops, and the parse alone (read and
   validate once); with ``--baseline DIR`` also the same whole process run from another checkout
   (e.g. the main branch), so the old/new ratio is printed beside it.
2. Porcupine's invalid kv logs (when ``tests/data/porcupine`` holds them): whole process against
   the search alone (the counterexample's window budget must not dominate).
3. Start-up: `chaos check` of a 4-line history against `python3 -c pass` (the interpreter's own
   start), and the difference: the tool's start-up.
4. `chaos analyze --master local[1]` and `local[2]`, the whole command (JVM start-up included),
   against the in-process `chaos check` loop (one Python process running
   :func:`chaos.history.checkers.registry.check_run` per run), over the same runs, for each run count:
   wall and CPU seconds of each process tree, the ratios, whether every run's verdict is the
   loop's, and the marginal wall and CPU per run (slope between the smallest and the largest run
   count) with the fixed cost (intercept). CPU seconds vary less with the machine's load.
   Beside them, "2 loops": the same loop over every other run in two processes at once, a perfect
   two-way split with no Spark in it; loop / 2 loops is the most any two executors can gain on this
   machine (two cores that share caches and memory bandwidth give two Python processes less than 2x).

    nice -n 10 python bench/scale.py [--sizes 100000:100,1000000:1000] [--runs 10,100] [--long]
        [--ops-per-run 10000] [--repeat 3] [--spark-repeat 1] [--baseline /work/main]
        [--skip-spark] [--skip-check]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECK = "import sys; from chaos.cli import main; sys.exit(main())"


def run_cli(root: Path, *args: str) -> float:
    """Wall seconds of ``chaos ARGS`` run as its own process from checkout ``root``."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    t = time.perf_counter()
    # run from the checkout itself: ``python -c`` puts the working directory first on sys.path
    p = subprocess.run(
        [sys.executable, "-c", CHECK, *args], env=env, cwd=root, capture_output=True, text=True
    )
    dt = time.perf_counter() - t
    if p.returncode not in (0, 1, 2):
        raise SystemExit(f"chaos {' '.join(args)} from {root} failed ({p.returncode}): {p.stderr[-400:]}")
    return dt


def paired(a: Callable[[], float], b: Callable[[], float], n: int) -> tuple[float, float, float]:
    """(median a, median b, median of a/b per pair), a and b run in turn ``n`` times."""
    xs, ys, rs = [], [], []
    for _ in range(n):
        x, y = a(), b()
        xs.append(x)
        ys.append(y)
        rs.append(x / y)
    return statistics.median(xs), statistics.median(ys), statistics.median(rs)


def timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def table(head: list[str], rows: list[list[str]]) -> None:
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print()


# ------------------------------------------------------------------------------------------------
# 1-3: chaos check


def write_register(path: Path, n_ops: int, keys: int, seed: int = 1) -> Path:
    from chaos.history.store import write_history
    from chaos.history.synth import register_history

    ops, _ = register_history(n_ops, keys=keys, processes=10, seed=seed, violations=0)
    write_history(path, ops)
    return path


def bench_check(sizes: list[tuple[int, int]], repeat: int, baseline: Path | None, tmp: Path) -> None:
    from chaos.history.checkers.linear import check_history
    from chaos.history.store import ParsedHistory

    rows = []
    for n_ops, keys in sizes:
        path = write_register(tmp / f"h{n_ops}.jsonl", n_ops, keys)
        ops = ParsedHistory.read(path).ops

        def whole(root: Path = ROOT, p: Path = path) -> float:
            return run_cli(root, "check", "--workers", "1", str(p))

        def search(o: list = ops) -> float:  # type: ignore[type-arg]
            return timed(lambda: check_history(o, "cas-register", workers=1))

        def parse(p: Path = path) -> float:
            return timed(lambda: ParsedHistory.read(p))

        w, s, ws = paired(whole, search, repeat)
        pr, s2, ps = paired(parse, search, repeat)
        row = [f"{n_ops:,} / {keys:,}", f"{ws:.2f}x", f"{ps:.2f}x", f"{1e6 * pr / n_ops:.1f} us"]
        if baseline is not None:

            def old(p: Path = path, base: Path = baseline) -> float:
                return run_cli(base, "check", "--workers", "1", str(p))

            _, _, old_new = paired(old, whole, repeat)
            row.append(f"{old_new:.2f}x")
        rows.append(row)
        print(f"  {n_ops:,} ops: whole {w:.2f} s, search {s:.2f} s, parse {pr:.2f} s (medians, this machine)")
    head = ["ops / keys", "whole process / search alone", "parse once / search alone", "parse per op"]
    if baseline is not None:
        head.append(f"{baseline} whole / this whole")
    table(head, rows)


def bench_kv_bad(repeat: int, baseline: Path | None) -> None:
    from chaos.history.checkers.linear import check_history
    from chaos.history.formats import load_history

    kv = ROOT / "tests" / "data" / "porcupine" / "test_data" / "kv"
    files = sorted(kv.glob("c*-bad.txt")) if kv.is_dir() else []
    if not files:
        print("(no porcupine kv logs in tests/data: skipped)\n")
        return
    rows = []
    for f in files:
        ops, spec = load_history(f)

        def whole(root: Path = ROOT, p: Path = f) -> float:
            return run_cli(root, "check", "--workers", "1", "--format", "porcupine-kv", str(p))

        def search(o: list = ops, m: str = spec) -> float:  # type: ignore[type-arg]
            return timed(lambda: check_history(o, m, workers=1))

        _, _, ws = paired(whole, search, repeat)
        row = [f.name, f"{ws:.2f}x"]
        if baseline is not None:

            def old(p: Path = f, base: Path = baseline) -> float:
                return run_cli(base, "check", "--workers", "1", "--format", "porcupine-kv", str(p))

            _, _, on = paired(
                old,
                whole,
                repeat,
            )
            row.append(f"{on:.2f}x")
        rows.append(row)
    head = ["invalid kv log", "whole process / search alone"]
    if baseline is not None:
        head.append(f"{baseline} whole / this whole")
    table(head, rows)


def bench_startup(repeat: int, baseline: Path | None, tmp: Path) -> None:
    path = tmp / "h4.jsonl"
    path.write_text(
        '{"index":0,"type":"invoke","process":0,"f":"write","value":1,"time":1}\n'
        '{"index":1,"type":"ok","process":0,"f":"write","value":1,"time":2}\n'
        '{"index":2,"type":"invoke","process":1,"f":"read","value":null,"time":3}\n'
        '{"index":3,"type":"ok","process":1,"f":"read","value":1,"time":4}\n'
    )

    def bare() -> float:
        return timed(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True))

    n = max(repeat, 7)
    rows = []
    for label, root in [("this checkout", ROOT), *([(str(baseline), baseline)] if baseline else [])]:

        def tool(r: Path = root) -> float:
            return run_cli(r, "check", str(path))

        c, b, r = paired(tool, bare, n)
        rows.append([label, f"{r:.2f}x", f"{c - b:.3f} s", f"{c:.3f} s", f"{b:.3f} s"])
    table(
        [
            "4-line history",
            "chaos check / python3 -c pass",
            "tool start-up (difference)",
            "chaos check wall",
            "python3 -c pass wall",
        ],
        rows,
    )


# ------------------------------------------------------------------------------------------------
# 4: chaos analyze


def make_runs(store: Path, runs: int, ops_per_run: int) -> list[Path]:
    from chaos.history.synth import register_history, write_run

    dirs = []
    for i in range(runs):
        ops, _ = register_history(
            ops_per_run, keys=10, processes=10, seed=i, violations=1 if i % 10 == 0 else 0
        )
        dirs.append(write_run(store, "register-synth", f"run{i:05d}", ops))
    return dirs


LOOP = (
    "import json, sys\n"
    "from chaos.history.checkers.registry import check_run\n"
    "from chaos.history.spark.tasks import run_id\n"
    "print(json.dumps({run_id(__import__('pathlib').Path(d)): check_run(d, workers=1)['valid']"
    " for d in sys.argv[1:]}))"
)


# the same loop over every other run, in two processes at once: what a perfect two-way split of the
# work would take on this machine (no Spark), the ceiling of any two-executor speedup
LOOP2 = (
    "import subprocess, sys\n"
    f"code = {LOOP!r}\n"
    "ps = [subprocess.Popen([sys.executable, '-c', code, *sys.argv[1 + i :: 2]]) for i in range(2)]\n"
    "sys.exit(max(p.wait() for p in ps))"
)
LOOPS = {"loop": LOOP, "2 loops": LOOP2}


def _session_cpu(sid: int, seen: dict[int, float]) -> int:
    """Record the CPU seconds (user + system) of every live process of session ``sid``; return
    how many there are."""
    tick = os.sysconf("SC_CLK_TCK")
    live = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:  # fields[3] is the session id; utime, stime are fields 11 and 12
            seen[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick
            live += 1
    return live


def run_tree(argv: list[str], cwd: Path, log: Path) -> tuple[float, float, int]:
    """(wall s until the command returns, CPU s of its whole process tree, exit status) of
    ``argv`` run in its own session: the CLI, the JVM it starts and the Python workers, sampled
    from /proc every 0.1 s (a process living less than that is missed) until the last of them
    has exited (the JVM ends a little after the command)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    seen: dict[int, float] = {}
    t = time.perf_counter()
    with open(log, "w") as out:
        p = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        while p.poll() is None:
            _session_cpu(p.pid, seen)
            time.sleep(0.1)
    wall = time.perf_counter() - t
    deadline = time.monotonic() + 60
    while _session_cpu(p.pid, seen) and time.monotonic() < deadline:
        time.sleep(0.1)
    return wall, sum(seen.values()), p.returncode


def analyze_argv(master: str, out: Path, dirs: list[str]) -> list[str]:
    """The whole `chaos analyze` command, as a user runs it, on ``master`` into ``out``."""
    return [sys.executable, "-c", CHECK, "analyze", "--master", master, "--out", str(out), *dirs]


def warm_spark(tmp: Path) -> None:
    """Two `chaos analyze` of one small run, 12 s apart: the first writes the JVM's class-data
    archive as it exits (``chaos.history.spark.session._cds_option``), the second adopts it, so every
    timed command starts as a user's second and later analyses do."""
    run = make_runs(tmp / "warm", 1, 100)[0]
    for n in range(2):
        run_tree(analyze_argv("local[1]", tmp / "warm-out", [str(run)]), ROOT, tmp / "warm.log")
        if n == 0:
            time.sleep(12)


def bench_analyze(run_counts: list[int], ops_per_run: int, repeat: int, tmp: Path) -> None:
    """`chaos analyze --master local[1]` and `local[2]`, each the whole command as a user runs it
    (JVM start-up included), against the in-process loop (one Python process running
    :func:`chaos.history.checkers.registry.check_run` per run, as `chaos check` does), on the same runs."""
    import json

    warm_spark(tmp)
    rows, stages = [], []
    walls: dict[str, dict[int, float]] = {"loop": {}, "2 loops": {}, "local[1]": {}, "local[2]": {}}
    cpus: dict[str, dict[int, float]] = {k: {} for k in walls}
    for n in run_counts:
        store = tmp / f"store{n}"
        dirs = [str(d) for d in make_runs(store, n, ops_per_run)]
        got: dict[str, list[tuple[float, float]]] = {k: [] for k in walls}
        same = True
        for _ in range(repeat):
            for name in walls:
                log = tmp / f"{n}-{name}.log"
                out = tmp / f"analysis{n}{name[-2]}"
                argv = (
                    [sys.executable, "-c", LOOPS[name], *dirs]
                    if name in LOOPS
                    else analyze_argv(name, out, dirs)
                )
                wall, cpu, code = run_tree(argv, ROOT, log)
                if code not in (0, 1, 2):  # before reading what a failed command did not write
                    raise SystemExit(f"{name} on {n} runs failed ({code}): {log.read_text()[-600:]}")
                if name == "loop":
                    loop = json.loads(log.read_text().splitlines()[-1])
                elif name == "2 loops":
                    halves = [json.loads(ln) for ln in log.read_text().splitlines()[-2:]]
                    same = same and {**halves[0], **halves[1]} == loop
                else:
                    summary = json.loads((out / "summary.json").read_text())
                    same = same and {r["run"]: r["valid"] for r in summary["runs"]} == loop
                    tm = summary["timings"]
                    stages.append(
                        f"  {n} runs, {name}: {wall:.1f} s = Spark start {tm['spark_start']:.1f} s"
                        f" + check, statistics and Parquet on the executors {tm['check_and_write_on_executors']:.1f} s"
                        f" + merge and summary {tm['summary']:.1f} s + the rest (Python start, imports, exit);"
                        f" {tm.get('runs_checked_while_spark_started', 0)} runs checked in the driver while Spark started"
                    )
                got[name].append((wall, cpu))
        for name in walls:
            walls[name][n] = statistics.median(w for w, _ in got[name])
            cpus[name][n] = statistics.median(c for _, c in got[name])
        lp, l2, s1, s2 = (walls[k][n] for k in ("loop", "2 loops", "local[1]", "local[2]"))
        rows.append(
            [
                f"{n:,} / {n * ops_per_run:,}",
                f"{lp / s2:.2f}x",
                f"{s1 / s2:.2f}x",
                f"{lp / l2:.2f}x",
                f"{lp / s1:.2f}x",
                "yes" if same else "NO",
                f"{lp:.1f} / {l2:.1f} / {s1:.1f} / {s2:.1f} s",
                " / ".join(f"{cpus[k][n]:.1f}" for k in walls) + " s",
            ]
        )
        shutil.rmtree(store)
    table(
        [
            "runs / ops",
            "loop / local[2] (>1: Spark faster)",
            "local[1] / local[2]",
            "loop / 2 loops (the machine's two-process ceiling)",
            "loop / local[1]",
            "verdicts equal",
            "wall loop / 2 loops / local[1] / local[2]",
            "CPU loop / 2 loops / local[1] / local[2] (process trees)",
        ],
        rows,
    )
    print("\n".join(stages) + "\n")
    for n in run_counts:
        goal = 1.4 if n >= 1000 else 1.0
        print(
            f"ratio: chaos analyze --master local[2] against the in-process loop, {n:,} runs / "
            f"{n * ops_per_run:,} ops: loop / local[2] = {walls['loop'][n] / walls['local[2]'][n]:.2f}x "
            f"(goal >= {goal:g}x; the two-process ceiling loop / 2 loops = "
            f"{walls['loop'][n] / walls['2 loops'][n]:.2f}x)"
        )
    if len(run_counts) > 1:
        lo, hi = min(run_counts), max(run_counts)
        marg = {k: (v[hi] - v[lo]) / (hi - lo) for k, v in walls.items()}
        fixed = {k: v[lo] - marg[k] * lo for k, v in walls.items()}
        cpu_marg = {k: (v[hi] - v[lo]) / (hi - lo) for k, v in cpus.items()}
        print(
            f"marginal wall per run ({ops_per_run:,} ops), slope {lo}->{hi} runs: "
            + ", ".join(f"{k} {v:.3f} s" for k, v in marg.items())
            + f"; loop per run / local[2] per run = {marg['loop'] / marg['local[2]']:.2f}x"
            + "\nfixed wall (intercept): "
            + ", ".join(f"{k} {v:.1f} s" for k, v in fixed.items())
            + "\nmarginal CPU per run: "
            + ", ".join(f"{k} {v:.3f} s" for k, v in cpu_marg.items())
            + "\n"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100000:100,1000000:1000", help="ops:keys,... for chaos check")
    ap.add_argument("--runs", default="10,100", help="run counts for chaos analyze")
    ap.add_argument("--long", action="store_true", help="also 1,000 runs for chaos analyze (long)")
    ap.add_argument("--spark-repeat", type=int, default=1, help="rounds of loop, local[1], local[2]")
    ap.add_argument("--ops-per-run", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3, help="pairs per ratio")
    ap.add_argument("--baseline", type=Path, help="another checkout to time the same whole process from")
    ap.add_argument("--skip-check", action="store_true")
    ap.add_argument("--skip-spark", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="chaos-bench-scale-"))
    try:
        if not args.skip_check:
            print("## chaos check: whole process against the search alone (same parsed ops)\n")
            sizes = [tuple(int(x) for x in s.split(":")) for s in args.sizes.split(",") if s]
            bench_check(sizes, args.repeat, args.baseline, tmp)  # type: ignore[arg-type]
            print("## porcupine's invalid kv logs\n")
            bench_kv_bad(args.repeat, args.baseline)
            print("## start-up\n")
            bench_startup(args.repeat, args.baseline, tmp)
        if not args.skip_spark:
            print("## chaos analyze on Spark against the in-process chaos check loop\n")
            counts = [int(n) for n in args.runs.split(",") if n] + ([1000] if args.long else [])
            bench_analyze(counts, args.ops_per_run, args.spark_repeat, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
