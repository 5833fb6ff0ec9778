"""A million-op history streams through the log, stats and perf checkers with bounded memory."""

from __future__ import annotations

import itertools
import json
import tracemalloc
from pathlib import Path

import pytest

from chaos.history.checkers import StatsChecker, compose
from chaos.history.logcheck import LogChecker
from chaos.history.perf import PerfChecker
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

    tracemalloc.start()
    r = compose([LogChecker(), StatsChecker(), PerfChecker()]).check({"workload": "log"}, path, {})
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

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
