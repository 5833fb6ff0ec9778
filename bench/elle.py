"""Elle list-append checker speed: valid histories of 10k, 100k and 1M transactions, strict-serializable.

Usage: python bench/elle.py [--sizes 10000,100000,1000000] [--processes 10] [--keep DIR]
                            [--format jsonl|edn|jsonl,edn]

The histories follow Elle's generator (``elle.list-append/gen``, ``jepsen.txn/wr-txns``): 1-4 micro-ops
per transaction, reads and appends half and half, an active pool of keys drawn with an exponential
distribution, each key's appends numbered 1, 2, 3, ... and the key retired (replaced by a fresh one)
after ``--max-writes-per-key`` appends, so reads stay short. Concurrent processes run on one perfect
store: each transaction takes effect at one instant between its invocation and its completion, so
every history is strict serializable and the checker must say valid.

Each size is checked by ``ElleChecker`` (reading the JSON Lines file, as ``chaos check`` does) in a
child process, so ``ru_maxrss`` is that check's peak alone; CPU and peak count any process the
check forks (EDN's row rewriter: its CPU added, its peak added to the check's). Printed per size: transactions, seconds,
transactions/s, peak RSS, and the phases (parse, inference, graph, search) the checker timed; the
last line gives the growth ratios (seconds per transaction at each size over the smallest).
Goals (issue 38): >= 80,000 txns/s wall at 1M on 2 cores (Elle, the JVM on many cores: 100-160k),
peak <= 2 GiB, growth close to linear; each ``ratio:`` line gives one of them with its figure.

``--format edn`` (or ``jsonl,edn``) also writes each history as EDN the way Jepsen writes
``history.edn`` (``jepsen.store/write-history!``: one ``prn`` of a ``jepsen.history.Op`` record per
line, ``#jepsen.history.Op{:index 0, :time 1000, :type :invoke, :process 3, :f :txn, :value [[:r 5
nil] [:append 7 1]]}``) and checks it the same way (``ElleChecker`` on the ``.edn`` file, read by
``chaos.history.checkers.elle.edn.collect_edn``); the line per size then gives EDN beside JSON Lines and the
ratios (issue 38 goal: EDN <= 1.5x JSON Lines in time and peak memory; 1M txns <= 2 GiB).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def generate(
    path: Path,
    n: int,
    *,
    processes: int = 10,
    active_keys: int = 10,
    max_writes_per_key: int = 32,
    seed: int = 0,
) -> None:
    """Write a valid list-append history of ``n`` transactions to ``path`` (JSON Lines).

    Each step picks a random process: an idle one invokes its next transaction, an invoked one
    applies it to the store atomically, an applied one completes ``ok``. Times are the step
    number in microseconds (as nanoseconds).
    """
    rng = random.Random(seed)
    state: dict[int, list[int]] = {}
    writes: dict[int, int] = {}
    pool = list(range(active_keys))
    next_key = active_keys
    phase = [0] * processes  # 0 idle, 1 invoked, 2 applied
    txn: list[Any] = [None] * processes
    started = 0
    done = 0
    index = 0
    step = 0
    dumps = orjson.dumps
    with open(path, "wb") as out:
        buf: list[bytes] = []
        while done < n:
            step += 1
            p = rng.randrange(processes)
            ph = phase[p]
            if ph == 0:
                if started >= n:
                    continue
                started += 1
                mops: list[list[Any]] = []
                for _ in range(rng.randint(1, 4)):
                    # exponential over the pool: low slots are hot
                    slot = min(int(rng.expovariate(1.0 / 3)), active_keys - 1)
                    k = pool[slot]
                    if rng.random() < 0.5:
                        mops.append(["r", k, None])
                    else:
                        w = writes.get(k, 0) + 1
                        writes[k] = w
                        mops.append(["append", k, w])
                        if w >= max_writes_per_key:  # retire the key
                            pool[slot] = next_key
                            next_key += 1
                txn[p] = mops
                phase[p] = 1
                buf.append(
                    dumps(
                        {
                            "index": index,
                            "type": "invoke",
                            "process": p,
                            "f": "txn",
                            "value": mops,
                            "time": step * 1000,
                        }
                    )
                )
                index += 1
            elif ph == 1:
                done_mops = []
                for f, k, v in txn[p]:
                    if f == "r":
                        cur = state.get(k)
                        done_mops.append(["r", k, None if cur is None else list(cur)])
                    else:
                        state.setdefault(k, []).append(v)
                        done_mops.append([f, k, v])
                txn[p] = done_mops
                phase[p] = 2
            else:
                buf.append(
                    dumps(
                        {
                            "index": index,
                            "type": "ok",
                            "process": p,
                            "f": "txn",
                            "value": txn[p],
                            "time": step * 1000,
                        }
                    )
                )
                index += 1
                done += 1
                phase[p] = 0
                if len(buf) >= 10000:
                    out.write(b"\n".join(buf) + b"\n")
                    buf.clear()
        if buf:
            out.write(b"\n".join(buf) + b"\n")


def _edn(v: Any) -> str:
    """``v`` as Clojure's ``pr`` prints it (strings as keywords: the micro-op functions and :f)."""
    if v is None:
        return "nil"
    if isinstance(v, str):
        return ":" + v
    if isinstance(v, list):
        return "[" + " ".join(map(_edn, v)) + "]"
    return str(v)


_EDN_KEYS = ("index", "time", "type", "process", "f", "value")


def write_edn(jsonl: Path, edn: Path) -> None:
    """Write the history of ``jsonl`` to ``edn`` as Jepsen's ``history.edn`` (one Op record per line)."""
    loads = orjson.loads
    with open(jsonl, "rb") as src, open(edn, "w") as out:
        buf: list[str] = []
        for raw in src:
            d = loads(raw)
            buf.append("#jepsen.history.Op{" + ", ".join(f":{k} {_edn(d[k])}" for k in _EDN_KEYS) + "}\n")
            if len(buf) >= 10000:
                out.write("".join(buf))
                buf.clear()
        out.write("".join(buf))


def _child(path: str, model: str, conn: Any) -> None:
    from chaos.history.checkers.elle import ElleChecker

    t0 = time.perf_counter()
    c0 = time.process_time()
    result = ElleChecker(workload="list-append", consistency_model=model).check({}, Path(path), {})
    wall = time.perf_counter() - t0
    # the CPU of any process the check forked (EDN's row rewriter) counts too
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = time.process_time() - c0 + kids.ru_utime + kids.ru_stime
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if kids.ru_maxrss:
        peak_mib += kids.ru_maxrss / 1024  # both at once, at most
    conn.send(
        {
            "valid": result["valid"],
            "txns": result["txns"],
            "wall": wall,
            "cpu": cpu,
            "peak_mib": peak_mib,
            "phases": result.get("phases", {}),
            "anomaly_types": result.get("anomaly_types"),
        }
    )
    conn.close()


def check_in_child(path: Path, model: str) -> dict[str, Any]:
    """Run the checker on ``path`` in a fresh child process; its figures."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(str(path), model, child))
    proc.start()
    child.close()
    out: dict[str, Any] = parent.recv()
    proc.join()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--processes", type=int, default=10)
    ap.add_argument("--max-writes-per-key", type=int, default=32)
    ap.add_argument("--model", default="strict-serializable")
    ap.add_argument("--keep", help="directory to keep the generated histories in")
    ap.add_argument("--format", default="jsonl", help="jsonl, edn, or jsonl,edn (side by side)")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    formats = a.format.split(",")
    if not set(formats) <= {"jsonl", "edn"}:
        ap.error(f"--format {a.format}: expected jsonl, edn or jsonl,edn")
    tmp = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="elle-bench-"))
    tmp.mkdir(parents=True, exist_ok=True)
    rows = []
    print(f"# list-append, {a.processes} processes, max {a.max_writes_per_key} writes/key, model {a.model}")
    print(f"# cpus={os.cpu_count()} python={sys.version.split()[0]}")
    for n in sizes:
        path = tmp / f"la-{n}.jsonl"
        if not path.exists():
            g0 = time.perf_counter()
            generate(path, n, processes=a.processes, max_writes_per_key=a.max_writes_per_key)
            print(
                f"generated {n} txns in {time.perf_counter() - g0:.1f} s ({path.stat().st_size / 2**20:.0f} MiB)"
            )
        per: dict[str, dict[str, Any]] = {}
        for fmt in formats:
            file = path
            if fmt == "edn":
                file = path.with_suffix(".edn")
                if not file.exists():
                    write_edn(path, file)
            r = check_in_child(file, a.model)
            per[fmt] = r
            rate = r["txns"] / r["wall"]
            phases = " ".join(f"{k}={v:.2f}s" for k, v in r["phases"].items())
            print(
                f"n={n:>8} {fmt:5} valid={r['valid']!s:5} wall={r['wall']:7.2f}s cpu={r['cpu']:7.2f}s "
                f"txns/s={rate:9.0f} peak={r['peak_mib']:7.0f} MiB  "
                f"({file.stat().st_size / 2**20:.0f} MiB file) [{phases}]"
            )
        if len(per) == 2:
            j, e = per["jsonl"], per["edn"]
            print(
                f"ratio: EDN / JSONL at {n} txns: time {e['wall'] / j['wall']:.2f}x (cpu "
                f"{e['cpu'] / j['cpu']:.2f}x), peak {e['peak_mib'] / j['peak_mib']:.2f}x "
                f"(goal <= 1.5x; same verdict: {e['valid'] == j['valid']})"
            )
        for fmt, r in per.items():
            if n >= 1_000_000:
                print(
                    f"ratio: {fmt} {n} txns: {r['txns'] / r['wall']:,.0f} txn/s wall, {r['txns'] / r['cpu']:,.0f} "
                    f"per CPU-second, against the goal of 80,000 txn/s on 2 cores: "
                    f"{r['txns'] / r['wall'] / 80_000:.2f}x (Elle: 100-160k txn/s on many cores); peak "
                    f"{r['peak_mib']:.0f} MiB (goal <= 2048 MiB)"
                )
        rows.append((n, per[formats[0]]))
    if len(rows) > 1:
        base = rows[0][1]["wall"] / rows[0][0]
        growth = " ".join(f"{n}:{(r['wall'] / n) / base:.2f}" for n, r in rows)
        print(f"seconds per txn relative to n={rows[0][0]} ({formats[0]}): {growth}")
    print(json.dumps({str(n): {k: r[k] for k in ("wall", "cpu", "peak_mib", "valid")} for n, r in rows}))


if __name__ == "__main__":
    main()
