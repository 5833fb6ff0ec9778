"""The bug catalogue bench: how many catalogued bugs does the tool catch, and how fast?

For every mutant in ``chaos_dledger/mutants/`` (a realistic bug class as a patch of the dledger package; see
``chaos_dledger.mutants``) this applies the patch to a copy of the package in a temporary directory, then:

- real clusters: for each configuration the patch header names (workload + nemesis + options),
  ``chaos run`` with ``CHAOS_DLEDGER_SOURCE`` pointing at the copy, up to ``--runs`` times, stopping
  at the first INVALID verdict (exit 1); the Docker cluster lock (``flock /tmp/chaos-docker.lock``)
  is held per run only, so other users of the cluster interleave;
- ``chaos sim`` (when the header names a simulator configuration): ``--sim-seeds`` seeds with
  ``PYTHONPATH`` pointing at the copy; any failing seed is a detection;

and ``--correct-runs`` runs of the unmodified server over the same configurations (false alarms),
plus ``--sim-seeds`` seeds of ``chaos sim`` per simulator configuration.

``--preset power`` replaces the patch headers' configurations by the ``chaos gate`` preset's
(:data:`chaos_dledger.presets.PRESETS`; those listed as catching the class are tried first), so the
table says what the default gate catches; ``--config 'WORKLOAD NEMESIS [--opt V ...]'`` (repeatable,
faults joined with ``,`` or ``+``) tries one configuration instead.

Every outcome is appended to ``--results`` (JSON Lines) as it completes, so a bench stopped early
keeps what it measured and later invocations (``--only CLASS``) add to it; the table printed at the
end, and written to ``--out`` (Markdown), is built from every record in that file (the newest per
class and configuration). Columns: bug class, configuration, runs to detection (``2/3`` = caught at
the 2nd of at most 3 runs; ``- (3)`` = 3 runs, not caught), the checker that said invalid and the
anomaly it named.

    python3 bench/catalogue.py --runs 3 --correct-runs 20 --time-limit 60
    python3 bench/catalogue.py --only get-uncommitted --runs 1 --no-sim
    python3 bench/catalogue.py --preset power --runs 3 --time-limit 30 --no-sim --correct-runs 20

Exit status 0 (the figures are the output), 254 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from chaos_dledger.mutants import Config, Mutant, MutantError, apply_mutant, check_imports, load_mutants  # noqa: E402

DOCKER_LOCK = "/tmp/chaos-docker.lock"
INVALID_LINE = re.compile(r"^\s+([a-z][\w-]*)\s+INVALID\s*(.*)$")
FAILING_SEED = re.compile(r"^seed (\d+): (?:INVALID|unknown)\b")


def parse_config(text: str, where: str) -> Config:
    """``"register clock-slow-leader --read-mode read-index"`` -> Config; MutantError naming ``where``."""
    words = shlex.split(text)
    if len(words) < 2 or words[0].startswith("-") or words[1].startswith("-"):
        raise MutantError(f"{where} {text!r}: expected 'WORKLOAD NEMESIS [--option value ...]'")
    return Config(words[0], words[1].replace("+", ","), tuple(words[2:]))


def say(msg: str) -> None:
    print(time.strftime("%H:%M:%S ") + msg, flush=True)


def invalid_checkers(stdout: str, run_dir: Path | None) -> list[tuple[str, str]]:
    """``(checker, anomaly)`` for every checker the run summary (or results.json) calls invalid."""
    found = [(m.group(1), m.group(2).strip()) for m in map(INVALID_LINE.match, stdout.splitlines()) if m]
    if run_dir is None or (found and all(text for _, text in found)):
        return found
    found = []
    try:
        res = json.loads((run_dir / "results.json").read_text())
    except (OSError, ValueError):
        return []
    for name, r in (res.get("checkers") or {}).items():
        if isinstance(r, dict) and r.get("valid") is False:
            if r.get("error"):
                text = str(r["error"])
            elif r.get("cause"):  # server-logs: the first quoted anomaly line
                text = f"{r.get('summary', '')}: {r['cause']}"
            elif r.get("failures"):
                text = "not linearizable: key " + ", ".join(map(str, r["failures"]))
            else:
                text = "invalid"
            found.append((name, text[:160]))
    return found


def latest_run(store: Path, before: set[Path]) -> Path | None:
    """The run directory this run created under ``store`` (one not in ``before``)."""
    runs = {p.parent for p in store.glob("*/*/test.json") if p.parent.name != "latest"} - before
    return max(runs, key=lambda p: p.stat().st_mtime) if runs else None


def real_run(cfg: Config, source: Path | None, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """One ``chaos run`` (under the Docker lock); returns the record of its outcome."""
    store = Path(args.store)
    store.mkdir(parents=True, exist_ok=True)
    before = {p.parent for p in store.glob("*/*/test.json") if p.parent.name != "latest"}
    cmd = [
        "flock",
        DOCKER_LOCK,
        "chaos",
        "run",
        "--workload",
        cfg.workload,
        "--nemesis",
        cfg.nemesis,
        "--time-limit",
        str(args.time_limit),
        "--store",
        str(store),
        "--seed",
        str(seed),
        "--no-live",
        *cfg.args,
    ]
    env = dict(os.environ)
    env.pop("CHAOS_DLEDGER_SOURCE", None)
    if source is not None:
        env["CHAOS_DLEDGER_SOURCE"] = str(source)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    run_dir = latest_run(store, before)
    bad: list[tuple[str, str]] = []
    if proc.returncode == 1 and run_dir is not None:
        # chaos check prints one line per checker in a fixed shape ("linear INVALID not linearizable: key 3")
        check = subprocess.run(["chaos", "check", str(run_dir)], capture_output=True, text=True, check=False)
        bad = invalid_checkers(check.stdout, run_dir)
    if proc.returncode == 1 and not bad:
        bad = invalid_checkers(proc.stdout, run_dir)
    tail = (
        (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:]
        if proc.returncode not in (0, 1, 2)
        else []
    )
    return {
        "exit": proc.returncode,
        "seconds": round(time.monotonic() - t0, 1),
        "run_dir": str(run_dir) if run_dir else None,
        "checkers": bad,
        "error": tail[0] if tail else None,
        "seed": seed,
    }


def sim_run(cfg: Config, source: Path | None, args: argparse.Namespace) -> dict[str, Any]:
    """``chaos sim`` over ``--sim-seeds`` seeds with the copy on PYTHONPATH."""
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = str(source) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    store = Path(args.store) / "sim"
    cmd = [
        "chaos",
        "sim",
        "--workload",
        cfg.workload,
        "--nemesis",
        cfg.nemesis,
        "--seeds",
        str(args.sim_seeds),
        "--jobs",
        str(args.sim_jobs),
        "--store",
        str(store),
        *cfg.args,
    ]
    store.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    # the working directory must not hold the original package (sys.path[0] for console scripts
    # is the script's directory, so this only guards `python -m` style launches)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=store, check=False)
    lines = (proc.stdout + proc.stderr).splitlines()
    failing = [ln.strip() for ln in lines if FAILING_SEED.search(ln)]
    return {
        "exit": proc.returncode,
        "seconds": round(time.monotonic() - t0, 1),
        "seeds": args.sim_seeds,
        "failing": failing[:5],
        "failing_count": len(failing),
        "error": lines[-1] if proc.returncode not in (0, 1, 2) and lines else None,
    }


def record(path: Path, rec: dict[str, Any]) -> None:
    with path.open("a") as f:
        f.write(json.dumps(rec) + "\n")


def preset_configs(name: str) -> list[tuple[Config, tuple[str, ...]]]:
    """The ``chaos gate`` preset ``name`` as ``(Config, classes it is listed as catching)``;
    MutantError for an unknown preset."""
    from chaos_dledger.presets import PRESETS

    if name not in PRESETS:
        raise MutantError(f"--preset {name}: expected one of {', '.join(PRESETS)}")
    return [(Config(r.workload, r.nemesis.replace("+", ","), r.args), r.catches) for r in PRESETS[name]]


def configs_for(m: Mutant, args: argparse.Namespace) -> list[Config]:
    """The real-cluster configurations to run ``m`` with: ``--config`` ones, else the ``--preset``
    (the configurations listed as catching ``m``'s class first), else the patch header's."""
    if args.configs:
        return list(args.configs)
    if args.preset:
        pairs = preset_configs(args.preset)
        return [c for c, caught in pairs if m.name in caught] + [
            c for c, caught in pairs if m.name not in caught
        ]
    return list(m.real)


def bench_mutant(m: Mutant, args: argparse.Namespace, results: Path) -> None:
    with tempfile.TemporaryDirectory(prefix=f"mutant-{m.name}-") as tmp:
        try:
            source = apply_mutant(m, Path(tmp))
            check_imports(source)
        except MutantError as e:
            say(f"{m.name}: {e}")
            record(results, {"kind": "mutant", "class": m.name, "config": "-", "error": str(e), "runs": []})
            return
        if not args.no_real:
            for i, cfg in enumerate(configs_for(m, args)):
                runs: list[dict[str, Any]] = []
                for k in range(args.runs):
                    say(f"{m.name}: {cfg.label()} run {k + 1}/{args.runs}")
                    r = real_run(cfg, source, args, seed=1000 * i + k + args.seed)
                    runs.append(r)
                    say(
                        f"  exit {r['exit']} in {r['seconds']} s {r['checkers'] or r['error'] or ''} {r['run_dir']}"
                    )
                    if r["exit"] == 1:
                        break
                detected = any(r["exit"] == 1 for r in runs)
                record(
                    results,
                    {
                        "kind": "mutant",
                        "class": m.name,
                        "config": cfg.label(),
                        "runs": runs,
                        "max_runs": args.runs,
                    },
                )
                if detected and not args.all_configs:
                    break
        if m.sim is not None and not args.no_sim and args.sim_seeds > 0:
            say(f"{m.name}: chaos sim {m.sim.label()} x {args.sim_seeds} seeds")
            r = sim_run(m.sim, source, args)
            say(f"  exit {r['exit']} in {r['seconds']} s, failing seeds {r['failing_count']}")
            record(results, {"kind": "mutant-sim", "class": m.name, "config": "sim " + m.sim.label(), **r})


def bench_correct(mutants: list[Mutant], args: argparse.Namespace, results: Path) -> None:
    configs: list[Config] = list(args.configs)
    if not configs and args.preset:
        configs = [c for c, _ in preset_configs(args.preset)]
    for m in mutants if not configs else ():
        for c in m.real:
            if c not in configs:
                configs.append(c)
    for k in range(args.correct_runs if not args.no_real else 0):
        cfg = configs[k % len(configs)]
        say(f"correct server: {cfg.label()} run {k + 1}/{args.correct_runs}")
        r = real_run(cfg, None, args, seed=args.seed + 7919 * (k + 1))
        say(f"  exit {r['exit']} in {r['seconds']} s {r['checkers'] or r['error'] or ''} {r['run_dir']}")
        record(results, {"kind": "correct", "class": "(correct server)", "config": cfg.label(), "runs": [r]})
    if not args.no_sim and args.sim_seeds > 0:
        sims = []
        for m in mutants:
            if m.sim is not None and m.sim not in sims:
                sims.append(m.sim)
        for cfg in sims:
            say(f"correct server: chaos sim {cfg.label()} x {args.sim_seeds} seeds")
            r = sim_run(cfg, None, args)
            say(f"  exit {r['exit']} in {r['seconds']} s, failing seeds {r['failing_count']}")
            record(
                results,
                {"kind": "correct-sim", "class": "(correct server)", "config": "sim " + cfg.label(), **r},
            )


def _anomaly(checkers: list[list[str]] | list[tuple[str, str]]) -> tuple[str, str]:
    if not checkers:
        return "", ""
    names = ", ".join(c[0] for c in checkers)
    text = "; ".join(c[1] for c in checkers)
    return names, (text[:140] + "…") if len(text) > 140 else text


def table(results: Path, mutants: list[Mutant]) -> str:
    """The Markdown detection table from every record in ``results`` (newest per class and config)."""
    newest: dict[tuple[str, str, str], dict[str, Any]] = {}
    correct_real: list[dict[str, Any]] = []
    correct_sim: list[dict[str, Any]] = []
    if results.is_file():
        for line in results.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec["kind"] == "correct":
                correct_real.append(rec)
            elif rec["kind"] == "correct-sim":
                correct_sim.append(rec)
            else:
                newest[(rec["kind"], rec["class"], rec["config"])] = rec
    rows = [
        "| bug class | configuration | runs to detection | checker | anomaly |",
        "|---|---|---|---|---|",
    ]
    order = {m.name: i for i, m in enumerate(mutants)}
    for (kind, cls, cfg), rec in sorted(
        newest.items(), key=lambda kv: (order.get(kv[0][1], 99), kv[0][0], kv[0][2])
    ):
        if rec.get("error") and kind == "mutant" and not rec.get("runs"):
            rows.append(f"| {cls} | - | patch error | | {rec['error']} |")
            continue
        if kind == "mutant-sim":
            if rec["exit"] == 1:
                det = f"{rec['failing_count']}/{rec['seeds']} seeds"
            elif rec["exit"] in (0, 2):
                det = f"- ({rec['seeds']} seeds)"
            else:
                det = f"error (exit {rec['exit']})"
            rows.append(
                f"| {cls} | chaos sim {cfg[4:]} | {det} | {'sim' if rec['exit'] == 1 else ''} | {'; '.join(rec.get('failing') or [])[:140]}"
                f"{rec.get('error') or ''} |"
            )
            continue
        runs = rec["runs"]
        hit = next((i for i, r in enumerate(runs) if r["exit"] == 1), None)
        crashes = [r for r in runs if r["exit"] not in (0, 1, 2)]
        if hit is not None:
            det = f"{hit + 1}/{rec['max_runs']}"
            checker, anomaly = _anomaly(runs[hit]["checkers"])
        else:
            det = f"- ({len(runs)})"
            checker, anomaly = "", ""
            if crashes:
                anomaly = f"{len(crashes)} run(s) crashed: {crashes[-1].get('error') or ''}"[:140]
        rows.append(f"| {cls} | {cfg} | {det} | {checker} | {anomaly.replace('|', '/')} |")
    caught = {
        c for (k, c, _), r in newest.items() if k == "mutant" and any(x["exit"] == 1 for x in r["runs"])
    }
    caught_sim = {c for (k, c, _), r in newest.items() if k == "mutant-sim" and r["exit"] == 1}
    tried = {c for (_, c, _) in newest}
    out = ["\n".join(rows), ""]
    out.append(
        f"Classes tried: {len(tried)}; caught on real clusters: {len(caught)}"
        f" ({', '.join(sorted(caught)) or 'none'}); caught only by chaos sim:"
        f" {len(caught_sim - caught)} ({', '.join(sorted(caught_sim - caught)) or 'none'});"
        f" not caught: {', '.join(sorted(tried - caught - caught_sim)) or 'none'}."
    )
    if correct_real:
        fa = [r for r in correct_real if r["runs"][0]["exit"] == 1]
        other = [r for r in correct_real if r["runs"][0]["exit"] not in (0, 1)]
        out.append(
            f"Correct server, real clusters: {len(fa)} false alarm(s) in {len(correct_real)} runs"
            + (
                f" ({len(other)} not valid for other reasons: exit {sorted({r['runs'][0]['exit'] for r in other})})"
                if other
                else ""
            )
            + "".join(f"\n  - {r['config']}: {_anomaly(r['runs'][0]['checkers'])}" for r in fa)
        )
    for r in correct_sim:
        out.append(
            f"Correct server, chaos sim {r['config'][4:]}: {r['failing_count']} failing of {r['seeds']} seeds (exit {r['exit']})"
        )
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="runs per configuration until detection (default 3)")
    ap.add_argument("--correct-runs", type=int, default=0, help="runs of the correct server (false alarms)")
    ap.add_argument(
        "--time-limit", type=float, default=60.0, help="generator phase of each run, s (default 60)"
    )
    ap.add_argument("--only", action="append", default=[], help="bug class to run (repeatable, or a,b)")
    ap.add_argument("--sim-seeds", type=int, default=200, help="chaos sim seeds per class (0: no sim)")
    ap.add_argument(
        "--sim-jobs", type=int, default=1, help="chaos sim --jobs (default 1: the machine is shared)"
    )
    ap.add_argument("--no-real", action="store_true", help="no real-cluster runs")
    ap.add_argument("--no-sim", action="store_true", help="no chaos sim runs")
    ap.add_argument("--all-configs", action="store_true", help="keep trying configurations after a detection")
    ap.add_argument("--seed", type=int, default=1, help="base seed of the runs")
    ap.add_argument("--store", default="store/catalogue", help="store for the runs (default store/catalogue)")
    ap.add_argument("--results", default=None, help="JSON Lines of outcomes (default STORE/results.jsonl)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "catalogue.md"), help="Markdown table to write")
    ap.add_argument(
        "--config",
        action="append",
        default=[],
        help="real-cluster configuration 'WORKLOAD NEMESIS [--opt V ...]' instead of the patch headers' (repeatable)",
    )
    ap.add_argument(
        "--preset",
        default=None,
        help="run the chaos gate preset's configurations (e.g. power; those listed for the class first)",
    )
    ap.add_argument("--table-only", action="store_true", help="print the table from --results and stop")
    ap.add_argument("--correct-only", action="store_true", help="only the correct-server runs")
    args = ap.parse_args()
    for opt in ("runs", "sim_jobs"):
        if getattr(args, opt) < 1:
            print(
                f"--{opt.replace('_', '-')} {getattr(args, opt)}: expected a positive integer",
                file=sys.stderr,
            )
            return 254
    if args.correct_runs < 0 or args.sim_seeds < 0 or not 0 < args.time_limit < 3600:
        print(
            "--correct-runs/--sim-seeds: expected >= 0; --time-limit: expected 0 < S < 3600", file=sys.stderr
        )
        return 254
    try:
        mutants = load_mutants()
    except MutantError as e:
        print(e, file=sys.stderr)
        return 254
    only = {c for o in args.only for c in o.split(",") if c}
    unknown = only - {m.name for m in mutants}
    if unknown:
        print(
            f"--only {','.join(sorted(unknown))}: expected one of {', '.join(m.name for m in mutants)}",
            file=sys.stderr,
        )
        return 254
    try:
        args.configs = [parse_config(c, "--config") for c in args.config]
        if args.preset:
            preset_configs(args.preset)
    except MutantError as e:
        print(e, file=sys.stderr)
        return 254
    results = Path(args.results or Path(args.store) / "results.jsonl")
    results.parent.mkdir(parents=True, exist_ok=True)
    if not args.table_only:
        for m in mutants:
            if (not only or m.name in only) and not args.correct_only:
                bench_mutant(m, args, results)
        if args.correct_only or not only:  # --only CLASS runs that class alone
            bench_correct(mutants, args, results)
    text = table(results, mutants)
    print(text)
    Path(args.out).write_text(
        "# Bug catalogue: detection table\n\nMeasured with `python3 bench/catalogue.py` (see its docstring);"
        " each row is the newest outcome per class and configuration.\n\n" + text
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
