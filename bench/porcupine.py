"""`chaos check` against porcupine itself, whole process against whole process (issue 27).

Builds our Go harness (``bench/porcupine/main.go``, which uses porcupine as a library: a model
partitioned by key, ``porcupine.CheckOperations``) against a porcupine source tree, then times, in
turn (A B A B ..., the median of the per-pair ratios, so a loaded machine moves both sides alike):

1. a synthetic register history of 100k ops / 100 keys and one of 1M ops / 1,000 keys
   (``bench/scale.py``'s generator: :func:`chaos.history.synth.register_history`), as JSON Lines;
2. porcupine's invalid kv logs ``c50-bad`` and ``c10-bad`` (``tests/data/porcupine`` when it holds
   them, else the source tree's ``test_data/kv``): `chaos check` as it is (every key checked, a
   counterexample for each invalid one) and with ``--fail-fast`` (stop at the first invalid key,
   as porcupine does);
3. start-up: `chaos check` of a 4-line history (wall seconds), porcupine's beside it, and the
   Python interpreter's own start (``python3 -c pass``) for scale.

The checkout's packages are byte-compiled first (:func:`compile_tool`), as an installed tool is.

Each side runs as its own process with its defaults (`chaos check FILE` uses every CPU for the
search, as porcupine checks keys on every CPU; ``--single-core`` runs ``--workers 1`` against
``GOMAXPROCS=1``). Wall and CPU (user + sys of the process and its children) ratios are printed,
and both verdicts, which must agree.

    nice -n 10 python bench/porcupine.py [--porcupine-src DIR] [--repeat 3] [--sizes 100000:100,1000000:1000]
        [--chaos-root CHECKOUT] [--single-core]

The porcupine source is ``--porcupine-src``, else ``$PORCUPINE_SRC``, else the local mirror below;
a git directory without a work tree is exported with ``git archive``. Needs Go (1.19+) and no
network (``GOPROXY=off``, a ``replace`` directive to the source). Without Go or the source, it
says so in one line and times `chaos check` alone against porcupine's medians recorded by this
bench (:data:`RECORDED`, the same inputs, the same kind of machine), marked ``recorded``.

Every row is also printed as a ``ratio:`` line against its goal (issue 38): <= 1.2x on the register
histories, <= 2x on c50-bad, and the start-up of `chaos check` <= 1.5x ``python3 -c pass``.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HARNESS = ROOT / "bench" / "porcupine"
DEFAULT_SRC = "/work/.mirror/anishathalye+porcupine/repo"
VERDICTS = {0: "valid", 1: "invalid", 2: "unknown"}
# porcupine's own wall seconds (medians) and verdicts, measured by this bench (Go 1.19) on the 2-core
# development machine: the reference when Go is missing. 100k ops and the kv logs at load below 1
# (2026-11-27, docs/measurements.md); 1M ops on 2026-11-28 at load 5 (none quieter was had)
RECORDED: dict[str, tuple[float, str]] = {
    "100,000 ops / 100 keys": (0.54, "valid"),
    "1,000,000 ops / 1,000 keys": (10.4, "valid"),
    "kv c50-bad": (0.045, "invalid"),
    "kv c50-bad --fail-fast": (0.045, "invalid"),
    "kv c10-bad": (0.003, "invalid"),
    "kv c10-bad --fail-fast": (0.003, "invalid"),
    "start-up: 4-line history": (0.002, "valid"),
}
# each row's goal (issue 38), as a ratio of the two sides' wall
GOALS = {
    "100,000 ops / 100 keys": 1.2,
    "1,000,000 ops / 1,000 keys": 1.2,
    "kv c50-bad": 2.0,
    "kv c50-bad --fail-fast": 2.0,
    "start-up against python3 -c pass": 1.5,
}


def porcupine_tree(src: Path, tmp: Path) -> Path | None:
    """A directory holding porcupine's Go source: ``src`` itself, or ``src`` (a git directory)
    exported into ``tmp``; None when neither works."""
    if (src / "porcupine.go").is_file():
        return src
    if not (src / "HEAD").is_file():
        return None
    out = tmp / "porcupine-src"
    out.mkdir()
    archive = subprocess.run(["git", "-C", str(src), "archive", "HEAD"], capture_output=True)
    if archive.returncode != 0:
        return None
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive.stdout, check=True)
    return out if (out / "porcupine.go").is_file() else None


def build(src: Path, tmp: Path) -> Path:
    """Build the harness against ``src`` (offline); returns the binary."""
    work = tmp / "porcheck"
    work.mkdir()
    shutil.copy(HARNESS / "main.go", work / "main.go")
    mod = (HARNESS / "go.mod.in").read_text().replace("@PORCUPINE_SRC@", str(src))
    (work / "go.mod").write_text(mod)
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOPROXY": "off", "GO111MODULE": "on"}
    p = subprocess.run(
        ["go", "build", "-o", "porcheck", "."], cwd=work, env=env, capture_output=True, text=True
    )
    if p.returncode != 0:
        raise SystemExit(f"go build of the porcupine harness failed:\n{p.stderr[-2000:]}")
    return work / "porcheck"


def run(cmd: list[str], env: dict[str, str], cwd: Path = ROOT) -> tuple[float, float, int, str]:
    """(wall s, cpu s (user + sys, the process and everything it waited for), exit status, last
    stdout line) of ``cmd`` run to its end."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if p.returncode not in VERDICTS:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}): {(p.stderr or p.stdout)[-600:]}")
    lines = p.stdout.strip().splitlines()
    return wall, cpu, p.returncode, lines[-1] if lines else ""


class Side:
    """One command, timed in pairs against another; keeps every run's figures."""

    def __init__(self, cmd: list[str], env: dict[str, str], cwd: Path = ROOT):
        self.cmd, self.env, self.cwd = cmd, env, cwd
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.codes: set[int] = set()
        self.line = ""

    def once(self) -> None:
        w, c, code, line = run(self.cmd, self.env, self.cwd)
        self.wall.append(w)
        self.cpu.append(c)
        self.codes.add(code)
        self.line = line

    @property
    def verdict(self) -> str:
        return "/".join(VERDICTS[c] for c in sorted(self.codes))


def pair(a: Side, b: Side, n: int) -> tuple[float, float]:
    """Median a/b ratios (wall, cpu) over ``n`` pairs run in turn, after one warm-up pair."""
    a.once()
    b.once()
    for figures in (a.wall, a.cpu, b.wall, b.cpu):
        figures.clear()
    for _ in range(n):
        a.once()
        b.once()
    rw = statistics.median(x / y for x, y in zip(a.wall, b.wall, strict=True))
    rc = statistics.median(x / max(y, 1e-3) for x, y in zip(a.cpu, b.cpu, strict=True))
    return rw, rc


def chaos_env(root: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(root)}


def compile_tool(root: Path) -> None:
    """Byte-compile the checkout's packages, as ``pip install`` and ``./install.sh`` leave them:
    with ``PYTHONDONTWRITEBYTECODE`` set (as on the development machine) no process would write
    the cache, and every timed start would compile the tool from source (about 50 ms)."""
    import compileall

    for pkg in ("chaos", "chaos_dledger", "dledger"):
        if (root / pkg).is_dir():
            compileall.compile_dir(str(root / pkg), quiet=1)


def write_register(path: Path, n_ops: int, keys: int) -> None:
    sys.path.insert(0, str(ROOT))
    from chaos.history.store import write_history
    from chaos.history.synth import register_history

    ops, _ = register_history(n_ops, keys=keys, processes=10, seed=1, violations=0)
    write_history(path, ops)


def kv_logs(src: Path | None) -> list[Path]:
    here = ROOT / "tests" / "data" / "porcupine" / "test_data" / "kv"
    out = []
    for name in ("c50-bad.txt", "c10-bad.txt"):
        p = here / name
        if not p.is_file() and src is not None:
            p = src / "test_data" / "kv" / name
        if p.is_file():
            out.append(p)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--porcupine-src", type=Path, default=Path(os.environ.get("PORCUPINE_SRC", DEFAULT_SRC)))
    ap.add_argument("--sizes", default="100000:100,1000000:1000", help="ops:keys,... (register histories)")
    ap.add_argument("--repeat", type=int, default=3, help="pairs per ratio (1M ops: at most 2)")
    ap.add_argument(
        "--chaos-root",
        type=Path,
        default=ROOT,
        help="the checkout whose chaos check is timed (default this one)",
    )
    ap.add_argument("--single-core", action="store_true", help="chaos --workers 1 against GOMAXPROCS=1")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="chaos-bench-porcupine-"))
    try:
        src = porcupine_tree(args.porcupine_src, tmp)
        binary: Path | None = None
        if shutil.which("go") is None:
            print(
                "porcupine not run: no `go` on PATH (porcupine is Go; install Go 1.19+); chaos check is "
                "timed against porcupine's medians recorded by this bench (RECORDED)"
            )
        elif src is None:
            print(
                f"porcupine not run: no porcupine source at {args.porcupine_src} (pass --porcupine-src "
                "DIR); chaos check is timed against porcupine's medians recorded by this bench (RECORDED)"
            )
        else:
            binary = build(src, tmp)
        compile_tool(args.chaos_root)
        bench(binary, src, args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class Recorded:
    """porcupine's side when it cannot run: its recorded median wall (:data:`RECORDED`)."""

    def __init__(self, label: str):
        self.seconds, self.verdict = RECORDED[label]
        self.line = "(recorded)"


def _cases(
    args: argparse.Namespace, src: Path | None, tmp: Path
) -> list[tuple[str, list[str], list[str], int]]:
    """(label, chaos check's arguments, porcupine's arguments, pairs) of every row."""
    cases: list[tuple[str, list[str], list[str], int]] = []
    for spec in filter(None, args.sizes.split(",")):
        n_ops, keys = (int(x) for x in spec.split(":"))
        path = tmp / f"register-{n_ops}.jsonl"
        t = time.perf_counter()
        write_register(path, n_ops, keys)
        print(f"(wrote {n_ops:,} ops / {keys:,} keys in {time.perf_counter() - t:.0f} s)", flush=True)
        reps = args.repeat if n_ops < 1_000_000 else min(args.repeat, 2)
        cases.append((f"{n_ops:,} ops / {keys:,} keys", [str(path)], [str(path)], reps))
    for log in kv_logs(src):
        chaos_args = ["--format", "porcupine-kv", str(log)]
        reps = max(args.repeat, 5)
        cases.append((f"kv {log.stem}", chaos_args, ["-format", "kv", str(log)], reps))
        # porcupine stops at the first invalid key; chaos checks every key unless told to stop
        cases.append(
            (f"kv {log.stem} --fail-fast", ["--fail-fast", *chaos_args], ["-format", "kv", str(log)], reps)
        )
    h4 = tmp / "h4.jsonl"
    h4.write_text(
        '{"index":0,"type":"invoke","process":0,"f":"write","value":1,"time":1}\n'
        '{"index":1,"type":"ok","process":0,"f":"write","value":1,"time":2}\n'
        '{"index":2,"type":"invoke","process":1,"f":"read","value":null,"time":3}\n'
        '{"index":3,"type":"ok","process":1,"f":"read","value":1,"time":4}\n'
    )
    cases.append(("start-up: 4-line history", [str(h4)], [str(h4)], max(args.repeat, 7)))
    return cases


def _startup_ratio(chaos: list[str], h4: str, args: argparse.Namespace) -> tuple[float, float, float]:
    """(chaos / python3 -c pass wall ratio, medians of each): the tool's start-up paired against
    the interpreter's own, in turn."""
    a = Side([*chaos, h4], chaos_env(args.chaos_root), args.chaos_root)
    b = Side([sys.executable, "-c", "pass"], chaos_env(args.chaos_root), args.chaos_root)
    rw, _ = pair(a, b, max(args.repeat, 7))
    return rw, statistics.median(a.wall), statistics.median(b.wall)


def bench(binary: Path | None, src: Path | None, args: argparse.Namespace, tmp: Path) -> None:
    chaos = [sys.executable, "-m", "chaos.cli", "check"] + (["--workers", "1"] if args.single_core else [])
    go_env = {**os.environ, **({"GOMAXPROCS": "1"} if args.single_core else {})}
    rows = []
    ratios: list[tuple[str, float, str]] = []
    agree = True
    for label, chaos_args, go_args, reps in _cases(args, src, tmp):
        # run from the checkout itself: ``python -m`` puts the working directory first on sys.path
        a = Side([*chaos, *chaos_args], chaos_env(args.chaos_root), args.chaos_root)
        if binary is not None:
            b = Side([str(binary), *go_args], go_env)
            rw, rc = pair(a, b, reps)
            b_wall, b_verdict, cpu = statistics.median(b.wall), b.verdict, f"{rc:.2f}x"
        else:
            ref = Recorded(label)
            for _ in range(reps + 1):
                a.once()
            rw = statistics.median(a.wall[1:]) / ref.seconds
            b_wall, b_verdict, cpu = ref.seconds, ref.verdict, "(recorded)"
        same = a.verdict == b_verdict
        agree = agree and same
        source = "porcupine" if binary is not None else "porcupine recorded"
        rows.append(
            [
                label,
                f"{rw:.2f}x",
                cpu,
                f"{statistics.median(a.wall):.3f} / {b_wall:.3f} s",
                f"{a.verdict} / {b_verdict}" + ("" if same else " DISAGREE"),
            ]
        )
        ratios.append((f"chaos check / {source}, {label}", rw, label))
        print(f"  {label}: chaos {a.line!r}", flush=True)
    su, su_a, su_b = _startup_ratio(chaos, str(tmp / "h4.jsonl"), args)
    ratios.append(
        (
            f"chaos check start-up / python3 -c pass ({su_a:.3f} / {su_b:.3f} s)",
            su,
            "start-up against python3 -c pass",
        )
    )
    print()
    head = ["history", "chaos / porcupine (wall)", "(cpu)", "chaos / porcupine wall (median)", "verdicts"]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print()
    for text, ratio, key in ratios:
        goal = GOALS.get(key)
        print(f"ratio: {text}: {ratio:.2f}x" + (f" (goal <= {goal:g}x)" if goal else " (no goal)"))
    print("verdicts agree" if agree else "VERDICTS DISAGREE")
    if not agree:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
