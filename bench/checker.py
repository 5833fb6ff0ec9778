"""Linearizability checker speed: porcupine's etcd and kv histories, and a 100,000-op register history.

Usage: python bench/checker.py [--data ../shared/data] [--ops 100000] [--keys 100] [--skip-big]

Prints CPU and wall seconds (the machine may be shared; a calibration loop is printed so figures can
be compared across runs). Targets (issue 4): etcd set <= 1.0 s, kv/c50-ok <= 0.2 s, 100k ops < 60 s.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from chaos.history.checkers.linear import check_calls, check_history, history_calls
from chaos.history.checkers.models import get_model
from chaos.history.formats import load_history
from chaos.workloads.memory import register_workload_history

ROOT = Path(__file__).resolve().parent.parent


def calibrate() -> float:
    """CPU seconds of a fixed pure-Python loop (about 0.1 s on an idle 2-core dev machine)."""
    t = time.process_time()
    x = 0
    for i in range(3_000_000):
        x += i
    return time.process_time() - t


def verdict_seconds(path: Path) -> tuple[float, float, object]:
    """(cpu, wall) seconds of the search alone (parsed history, verdict only, parts in-process)."""
    ops, spec = load_history(path)
    m = get_model(spec)
    groups, _ = history_calls(ops)
    parts = []
    for calls in groups.values():
        calls.sort(key=lambda c: (c.call, c.index))
        parts.extend(m.partition(calls))
    c0, w0 = time.process_time(), time.perf_counter()
    valid: object = True
    for part in parts:
        r = check_calls(part, m, counterexample=False)
        if r.valid is False:
            valid = False
            break
    return time.process_time() - c0, time.perf_counter() - w0, valid


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--ops", type=int, default=100_000)
    ap.add_argument("--keys", type=int, default=100)
    ap.add_argument("--crash", type=float, default=0.005)
    ap.add_argument("--skip-big", action="store_true")
    a = ap.parse_args()
    data = Path(a.data) / "porcupine" / "test_data"
    print(f"calibration loop: {calibrate():.3f} s cpu (about 0.1 s when the machine is idle)")

    cpu = wall = 0.0
    etcd = sorted((data / "jepsen").glob("etcd_*.log"))
    etcd = [p for p in etcd if p.stat().st_size > 0]
    slow = []
    for p in etcd:
        c, w, _ = verdict_seconds(p)
        cpu += c
        wall += w
        slow.append((c, p.name))
    slow.sort(reverse=True)
    print(f"etcd ({len(etcd)} histories), verdicts: {cpu:.3f} s cpu, {wall:.3f} s wall  (target <= 1.0 s)")
    print("  slowest: " + ", ".join(f"{n} {c:.3f}" for c, n in slow[:5]))
    c0, w0 = time.process_time(), time.perf_counter()
    for p in etcd:
        ops, spec = load_history(p)
        check_history(ops, spec)
    print(
        f"etcd, check_history (parse + verdict + counterexamples): {time.process_time() - c0:.3f} s cpu, "
        f"{time.perf_counter() - w0:.3f} s wall"
    )
    for name in ("c50-ok.txt", "c50-bad.txt"):
        c, w, v = verdict_seconds(data / "kv" / name)
        tgt = "  (target <= 0.2 s)" if name == "c50-ok.txt" else ""
        print(f"kv/{name}: valid={v} {c:.3f} s cpu, {w:.3f} s wall{tgt}")
        ops, spec = load_history(data / "kv" / name)
        w0 = time.perf_counter()
        r = check_history(ops, spec)
        print(f"  check_history: valid={r['valid']} {time.perf_counter() - w0:.3f} s wall")

    # every key of c50-bad alone (porcupine's Go test stops at the first invalid key)
    ops, spec = load_history(data / "kv" / "c50-bad.txt")
    m = get_model(spec)
    groups, _ = history_calls(ops)
    c0 = time.process_time()
    verdicts, configs = [], 0
    for calls in groups.values():
        calls.sort(key=lambda c: (c.call, c.index))
        kr = check_calls(calls, m, time.monotonic() + 30, counterexample=False)
        verdicts.append(kr.valid)
        configs += kr.configs
    print(
        f"kv/c50-bad, each of {len(verdicts)} keys alone: {sum(v is False for v in verdicts)} invalid, "
        f"{configs} configs, {time.process_time() - c0:.3f} s cpu"
    )

    if not a.skip_big:
        # the register workload's own generator, run by the interpreter against an in-memory store
        with tempfile.TemporaryDirectory() as d:
            w0 = time.perf_counter()
            ops = register_workload_history(
                a.ops, Path(d) / "history.jsonl", keys=a.keys, crash=a.crash, seed=42
            )
            print(f"register workload generator: {time.perf_counter() - w0:.1f} s to record the history")
        n = sum(1 for op in ops if op.type == "invoke")
        info = sum(1 for op in ops if op.type == "info")
        w0 = time.perf_counter()
        r = check_history(ops, "cas-register")
        dt = time.perf_counter() - w0
        print(
            f"register, {n} ops over {a.keys} keys ({info} info): valid={r['valid']} "
            f"{dt:.2f} s wall  (target < 60 s)"
        )
        # the same with one impossible read, to time a violation with its counterexample
        for op in ops:
            if op.type == "ok" and op.f == "read" and op.key == a.keys // 2:
                op.value = 99
                break
        w0 = time.perf_counter()
        r = check_history(ops, "cas-register")
        print(
            f"  with one impossible read: valid={r['valid']} failures={r['failures']} {time.perf_counter() - w0:.2f} s wall"
        )


if __name__ == "__main__":
    main()
