"""Simulator power: seeds of ``chaos sim`` to the first failure of each catalogued bug class, and
failures in N seeds of the correct server for every configuration used (issue 14 "Power").

For each class of ``chaos_dledger/mutants`` the simulator reaches, :data:`CONFIGS` names the ``chaos sim``
configuration; the script applies the mutant to a copy of the ``dledger`` package
(:func:`chaos_dledger.mutants.apply_mutant`), runs ``chaos sim ... --seeds N --stop-on-failure`` with the
copy first on ``PYTHONPATH`` (from a scratch directory, so the checkout's own package is not picked
up; ``--root`` another tree, such as an export of HEAD) and records the seed count to the first failure and what failed (safety invariant or checker).
``--correct`` runs the unmodified server over every configuration instead. Records are appended
to ``--results`` (JSON Lines) as they complete; ``--table`` prints the Markdown table of the newest
record per class and configuration::

    nice -n 10 python3 bench/sim_power.py --seeds 2000 --jobs 1            # every class
    nice -n 10 python3 bench/sim_power.py --correct --seeds 2000 --jobs 1  # the correct server
    python3 bench/sim_power.py --table                                      # the README table
    nice -n 10 python3 bench/sim_power.py --swarm --seeds 2000 --jobs 1    # every class, default swarm
    nice -n 10 python3 bench/sim_power.py --swarm --correct --seeds 10000  # the correct server, swarm

``--swarm`` runs every class with the default ``chaos sim`` (no configuration: each seed draws its
own fault mix) instead of the class's configuration, and prints the campaign's seeds/s.

CPU time is the cost: a seed of 5 simulated seconds takes 0.1-0.3 s of CPU.
"""

from __future__ import annotations

import argparse
import json
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

# class -> chaos sim arguments; few configurations, each shared by several classes, because the
# 2,000 correct-server seeds per configuration are the expensive part
RAFT_LOG = [
    "--workload",
    "register",
    "--nemesis",
    "partition,kill,partition-leader,pause-leader,clock-slow-leader",
]
READ_INDEX = [*RAFT_LOG, "--read-mode", "read-index"]
# no clock fault: a lease read is safe only while clocks run at one rate (the correct server too)
LEASE = [
    "--workload",
    "register",
    "--nemesis",
    "partition,kill,partition-leader,pause-leader",
    "--read-mode",
    "lease",
]
FIGURE8 = ["--workload", "register", "--nemesis", "figure8", "--time-limit", "10"]
LOG = ["--workload", "log", "--nemesis", "partition,kill,power-failure"]
CONFIGS: dict[str, list[str]] = {
    "ack-before-quorum": RAFT_LOG,
    "vote-not-persisted": RAFT_LOG,
    "vote-without-log-check": RAFT_LOG,
    "leader-local-kv-read": RAFT_LOG,
    "deleted-keys-returning": RAFT_LOG,
    "read-index-no-confirm": READ_INDEX,
    "lease-no-step-down": LEASE,
    "figure8-old-term-commit": FIGURE8,
    "follower-commit-unbounded": LOG,
    "follower-ack-before-fsync": LOG,
    "get-uncommitted": LOG,
    # issue 23's classes from the field, each with the fault that exposes it
    "stale-vote-response": ["--workload", "register", "--nemesis", "slow-network,partition,kill"],
    "stale-term-push": ["--workload", "log", "--nemesis", "slow-network,partition-leader,kill-leader"],
    "leader-acks-before-own-fsync": [
        "--workload",
        "log",
        "--nemesis",
        "power-in-sync,kill-in-sync,partition",
    ],
    "repair-votes-while-damaged": ["--workload", "log", "--nemesis", "storage,partition,kill"],
    # issue 33's classes: snapshots, compaction and restarts are drawn by the world of every seed
    "snapshot-install-off-by-one": [
        "--workload",
        "register",
        "--nemesis",
        "kill,partition,leader-transfer",
        "--read-mode",
        "read-index",
    ],
    "replay-after-restart": ["--workload", "list-append", "--nemesis", "kill,leader-transfer"],
    "compaction-racing-lagging-follower": ["--workload", "register", "--nemesis", "kill,partition"],
    # the transferee campaigns before catching up and voters skip the log check for a transfer
    # campaign (default swarm: first caught at seed 10, tests/test_sim_power.py)
    "transfer-without-catch-up": ["--workload", "register", "--nemesis", "leader-transfer,kill,partition"],
    # issue 39's classes, each with the Jepsen workload that catches it
    "transfer-applied-half-way": ["--workload", "bank", "--nemesis", "partition,kill"],
    "increment-applied-twice": ["--workload", "counter", "--nemesis", "kill,leader-transfer"],
    "add-lost-on-leader-change": ["--workload", "set", "--nemesis", "partition,kill,partition-leader"],
    # harmful only under a partial failure: the leader's inbound slowed, then its outbound stalled
    "heartbeat-stale-round": [
        "--workload",
        "register",
        "--nemesis",
        "link-delay",
        "--read-mode",
        "read-index",
        "--time-limit",
        "10",
        "--rate",
        "100",
    ],
}
DEFAULT_RESULTS = ROOT / "store" / "sim-power" / "results.jsonl"

_FAILING = re.compile(r"^seed (\d+): (INVALID|unknown): (.*)$", re.M)
_TOTAL = re.compile(r"^(?:\w+: )?(\d+) seeds, (\d+) not valid", re.M)
_RATE = re.compile(r"^([\d.]+) seeds/s", re.M)
_COVERAGE = re.compile(r"^coverage \(.*$", re.M)


def run_sim(sim_args: list[str], seeds: int, args: argparse.Namespace, source: Path | None) -> dict[str, Any]:
    """``chaos sim`` over ``seeds`` seeds (stopping at the first failure for a mutant); its
    command line, exit status, seeds run, failing seeds and the first failure's reason."""
    if "--time-limit" not in sim_args and sim_args:
        sim_args = [*sim_args, "--time-limit", f"{args.time_limit:g}"]
    cmd = [sys.executable, "-m", "chaos.cli", "sim", *sim_args]
    cmd += ["--seeds", str(seeds), "--first-seed", str(args.first_seed), "--jobs", str(args.jobs)]
    if source is not None:
        cmd.append("--stop-on-failure")
    env = dict(os.environ)
    paths = [str(source)] if source is not None else []
    paths.append(str(args.root))  # chaos itself; root's dledger only when no copy comes first
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    with tempfile.TemporaryDirectory(prefix="sim-power-") as scratch:
        t0, c0 = time.monotonic(), os.times()
        p = subprocess.run(
            [*cmd, "--store", str(Path(scratch) / "store")],
            cwd=scratch,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        c1 = os.times()
    failing = [(int(s), v, why) for s, v, why in _FAILING.findall(p.stdout)]
    total = _TOTAL.search(p.stdout)
    rate = _RATE.search(p.stdout)
    coverage = _COVERAGE.search(p.stdout)
    return {
        "command": "chaos sim " + (" ".join(sim_args) or "(default swarm)"),
        "seeds_per_s": float(rate[1]) if rate else None,
        "exit": p.returncode,
        "seeds_run": int(total[1]) if total else None,
        "failing_count": int(total[2]) if total else None,
        "first_failure": failing[0][0] - args.first_seed + 1 if failing else None,
        "failing": [f"seed {s}: {why}" for s, _, why in failing[:5]],
        "wall_s": round(time.monotonic() - t0, 1),
        "cpu_s": round(c1.children_user + c1.children_system - c0.children_user - c0.children_system, 1),
        "stderr": p.stderr.strip().splitlines()[-3:] if p.returncode not in (0, 1) else [],
        "coverage": coverage[0] if coverage else None,
    }


def record(path: Path, rec: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(rec) + "\n")


def table(path: Path) -> str:
    """The Markdown table of the newest record per (kind, class, command) in ``path``."""
    newest: dict[tuple[str, str, str], dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            newest[(rec["kind"], rec["class"], rec["command"])] = rec
    rows = [
        "| bug class | `chaos sim` configuration | seeds to first failure | the failure |",
        "|---|---|---|---|",
    ]
    for (kind, cls, cmd), r in sorted(newest.items()):
        if kind != "mutant":
            continue
        found = f"{r['first_failure']}" if r["first_failure"] else f"not found in {r['seeds_run']}"
        why = r["failing"][0].split(": ", 1)[1] if r["failing"] else (", ".join(r["stderr"]) or "")
        rows.append(f"| {cls} | `{cmd}` | {found} | {why[:160]} |")
    rows += [
        "",
        "| correct server, `chaos sim` configuration | seeds | not valid | first failures |",
        "|---|---|---|---|",
    ]
    for (kind, _, cmd), r in sorted(newest.items()):
        if kind == "correct":
            first = "; ".join(r["failing"][:3])
            rows.append(f"| `{cmd}` | {r['seeds_run']} | {r['failing_count']} (exit {r['exit']}) | {first} |")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=2000, help="seeds per class or configuration")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument(
        "--time-limit",
        type=float,
        default=5.0,
        help="simulated seconds per seed (unless the configuration sets it)",
    )
    ap.add_argument("--jobs", type=int, default=1, help="chaos sim --jobs (the machine is shared)")
    ap.add_argument("--only", action="append", default=[], help="this class only (repeatable)")
    ap.add_argument("--correct", action="store_true", help="run the correct server over the configurations")
    ap.add_argument("--results", type=Path, default=DEFAULT_RESULTS)
    ap.add_argument(
        "--root",
        type=Path,
        default=ROOT,
        help="the tree whose chaos and dledger packages run (e.g. a 'git archive HEAD' export, so "
        "edits in the checkout during a long run do not mix in)",
    )
    ap.add_argument("--table", action="store_true", help="only print the table of --results")
    ap.add_argument(
        "--swarm",
        action="store_true",
        help="run the default chaos sim (swarm: a fault mix per seed) instead of each class's configuration",
    )
    args = ap.parse_args()
    if args.table:
        print(table(args.results))
        return 0
    known = {m.name for m in load_mutants()} if args.swarm else set(CONFIGS)
    unknown = [c for c in args.only if c not in known]
    if unknown or args.seeds < 1 or args.jobs < 1 or args.time_limit <= 0:
        print(
            f"--only {unknown}: expected classes among {', '.join(CONFIGS)}; --seeds, --jobs, "
            "--time-limit must be positive",
            file=sys.stderr,
        )
        return 254
    classes = args.only or sorted(known)
    # the root's own patches: they apply to the root's package (the checkout's may have moved on)
    # (an older root keeps them in bench/mutants)
    patch_dirs = [
        d for d in (args.root / "chaos_dledger" / "mutants", args.root / "bench" / "mutants") if d.is_dir()
    ]
    mutants = {m.name: m for m in (load_mutants(patch_dirs[0]) if patch_dirs else load_mutants())}
    if args.correct and args.swarm:
        r = run_sim([], args.seeds, args, None)
        record(args.results, {"kind": "correct", "class": "(correct server)", "seeds": args.seeds, **r})
        print(
            f"correct server, default swarm: {r['failing_count']} of {r['seeds_run']} not valid, {r['seeds_per_s']} seeds/s"
        )
    elif args.correct:
        done: set[tuple[str, ...]] = set()
        for cls in classes:
            cfg = tuple(CONFIGS[cls])
            if cfg in done:
                continue
            done.add(cfg)
            r = run_sim(list(cfg), args.seeds, args, None)
            rec = {"kind": "correct", "class": "(correct server)", "seeds": args.seeds, **r}
            record(args.results, rec)
            print(f"correct server: {r['command']}: {r['failing_count']} of {r['seeds_run']} not valid")
    else:
        for cls in classes:
            with tempfile.TemporaryDirectory(prefix=f"mutant-{cls}-") as tmp:
                copy = apply_mutant(mutants[cls], Path(tmp) / "copy", root=args.root)
                r = run_sim([] if args.swarm else CONFIGS[cls], args.seeds, args, copy)
            record(args.results, {"kind": "mutant", "class": cls, "seeds": args.seeds, **r})
            found = r["first_failure"] or f"not found in {r['seeds_run']}"
            print(
                f"{cls}: {r['command']}: seeds to first failure {found} ({r['seeds_per_s']} seeds/s); "
                f"{'; '.join(r['failing'][:1])}",
                flush=True,
            )
    print()
    print(table(args.results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
