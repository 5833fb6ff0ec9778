"""A million-op history streams through the log, stats and perf checkers with bounded memory.

The peak is measured as the checking process's resident set (``VmHWM`` less ``VmRSS`` before the
check, in a fresh interpreter so no earlier test's freed memory is reused): a true bound on what
the check costs, and about 20x cheaper than tracing every allocation with tracemalloc.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from chaos.history.store import read_history

N_OPS = 1_000_000
NODES = ("n1", "n2", "n3")


def _write_log_history(path: Path, n_appends: int, lost: int) -> int:
    """Sequential appends (10 processes, 1 ms apart) with a kill fault every 10,000, then one
    final read per node holding every value except ``lost``. Returns the op count."""
    idx = 0
    t = 0
    with open(path, "w") as f:
        w = f.write
        for v in range(n_appends):
            p = v % 10
            if v % 10_000 == 5_000:
                kind = "start-kill" if (v // 10_000) % 2 == 0 else "stop-kill"
                for _ in range(2):
                    w(
                        f'{{"index":{idx},"type":"info","process":"nemesis","f":"{kind}","value":{{"nodes":["n1"]}},"time":{t}}}\n'
                    )
                    idx += 1
            t += 1_000_000
            w(f'{{"index":{idx},"type":"invoke","process":{p},"f":"append","value":{v},"time":{t}}}\n')
            t += 500_000
            w(
                f'{{"index":{idx + 1},"type":"ok","process":{p},"f":"append","value":{v},"time":{t},"log_index":{v}}}\n'
            )
            idx += 2
        log = json.dumps([v for v in range(n_appends) if v != lost], separators=(",", ":"))
        for i, node in enumerate(NODES):
            t += 1_000_000
            w(
                f'{{"index":{idx},"type":"invoke","process":{100 + i},"f":"read","value":null,"time":{t},"node":"{node}"}}\n'
            )
            w(
                f'{{"index":{idx + 1},"type":"ok","process":{100 + i},"f":"read","value":{log},"time":{t + 1},"node":"{node}"}}\n'
            )
            idx += 2
    return idx


_CHECK_AND_MEASURE = """
import json, sys
from chaos.history.checkers.registry import StatsChecker, compose
from chaos.history.checkers.logcheck import LogChecker
from chaos.history.checkers.perf import PerfChecker

def status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))

checker = compose([LogChecker(), StatsChecker(), PerfChecker()])
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset the resident-set high-water mark (VmHWM) to the current size
before = status("VmRSS")
result = checker.check({"workload": "log"}, sys.argv[1], {})
json.dump({"result": result, "peak": status("VmHWM") - before}, sys.stdout, default=str)
"""


def _check_in_fresh_process(path: Path) -> tuple[dict, int]:
    """The log, stats and perf checkers over ``path`` in a new interpreter: (their composed result,
    peak resident-set growth in bytes during the check)."""
    proc = subprocess.run(
        [sys.executable, "-c", _CHECK_AND_MEASURE, str(path)],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],  # the checkers of this tree
    )
    out = json.loads(proc.stdout)
    return out["result"], out["peak"]


@pytest.mark.slow
def test_million_op_history_streams_with_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    n_appends = (N_OPS - 2 * len(NODES)) // 2 - 100
    n = _write_log_history(path, n_appends, lost=123_456)
    assert n >= 999_000

    # What holding ops as Python objects would cost: measured on a 20,000-op sample.
    tracemalloc.start()
    sample = list(itertools.islice(read_history(path), 20_000))
    per_op = tracemalloc.get_traced_memory()[0] / len(sample)
    tracemalloc.stop()
    del sample

    r, peak = _check_in_fresh_process(path)

    print(f"\n{n} ops: peak {peak / 1e6:.1f} MB streaming; holding them would take {per_op * n / 1e6:.0f} MB")
    log = r["checkers"]["log"]
    assert log["attempted"] == n_appends and log["acknowledged"] == n_appends
    assert log["lost_count"] == 1 and log["lost"][0]["value"] == 123_456 and log["valid"] is False
    assert r["checkers"]["stats"]["by_f"]["append"]["ok"] == n_appends
    perf = r["checkers"]["perf"]
    assert perf["latency"]["by_f"]["append"]["ok"]["p99"] == 0.5
    toggles = len(range(5_000, n_appends, 10_000))
    assert len(perf["latency"]["faults"]) == (toggles + 1) // 2
    # Holding the history would take per_op * n bytes (well over 200 MB); streaming keeps a few
    # arrays of 8-byte integers per append and the final reads.
    assert per_op * n > 200e6, per_op
    assert peak < 100e6, f"peak {peak / 1e6:.1f} MB"
    assert peak < 0.3 * per_op * n
