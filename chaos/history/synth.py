"""Synthetic histories with known verdicts, for tests and benchmarks.

:func:`register_history` simulates concurrent clients against a linearizable cas-register per key:
each op gets a real-time interval and a linearization point inside it, the ops are applied to the
model in linearization-point order, and the outputs are recorded. The result is linearizable by
construction; ``violations`` then alters that many ok reads to a value no one wrote, which makes
exactly those keys non-linearizable.
"""

from __future__ import annotations

import heapq
import json
import random
from pathlib import Path
from typing import Any

from chaos.history.op import FAIL, INFO, INVOKE, OK, Op

IMPOSSIBLE = 999  # never written by the generator


def register_history(
    n_ops: int,
    *,
    keys: int = 10,
    processes: int = 5,
    seed: int = 0,
    info_rate: float = 0.01,
    violations: int = 0,
    values: int = 5,
    mean_latency_ns: int = 2_000_000,
) -> tuple[list[Op], list[Any]]:
    """A keyed register history of ``n_ops`` client operations (each an invoke and a completion).

    Returns ``(ops, violated_keys)``; ops are in time order with ``index`` set. Reads return ints or
    None (absent); cas is ``[expected, new]`` and ``fail`` when the compare fails; ``info`` ops
    (probability ``info_rate``) may or may not take effect, and their process is retired as Jepsen
    does (new id = old id + ``processes``).
    """
    rng = random.Random(seed)
    # (lin_point, seq, process, key, f, value, invoke_time, complete_time, crashed)
    planned: list[tuple[int, int, int, int, str, Any, int, int, bool]] = []
    free_at = [(rng.randrange(1000), p) for p in range(processes)]
    heapq.heapify(free_at)
    proc_id = list(range(processes))
    for seq in range(n_ops):
        t, slot = heapq.heappop(free_at)
        invoke = t + rng.randrange(1, 50_000)
        duration = max(1000, int(rng.expovariate(1 / mean_latency_ns)))
        complete = invoke + duration
        lin = invoke + rng.randrange(duration)
        key = rng.randrange(keys)
        roll = rng.random()
        value: Any
        if roll < 0.5:
            f, value = "read", None
        elif roll < 0.8:
            f, value = "write", rng.randrange(values)
        else:
            f, value = "cas", [rng.randrange(values), rng.randrange(values)]
        crashed = f != "read" and rng.random() < info_rate
        planned.append((lin, seq, proc_id[slot], key, f, value, invoke, complete, crashed))
        if crashed:
            proc_id[slot] += processes
        heapq.heappush(free_at, (complete, slot))

    state: dict[int, Any] = {}
    events: list[tuple[int, int, Op]] = []
    ok_reads: list[Op] = []
    for _lin, seq, process, key, f, value, invoke, complete, crashed in sorted(planned):
        inv = Op(type=INVOKE, process=process, f=f, value=value, time=invoke, key=key)
        if f == "read":
            done = Op(type=OK, process=process, f=f, value=state.get(key), time=complete, key=key)
            ok_reads.append(done)
        elif f == "write":
            if not crashed or rng.random() < 0.5:
                state[key] = value
            done = Op(type=INFO if crashed else OK, process=process, f=f, value=value, time=complete, key=key)
        else:
            applies = state.get(key) == value[0]
            if crashed:
                if applies and rng.random() < 0.5:
                    state[key] = value[1]
                done = Op(type=INFO, process=process, f=f, value=value, time=complete, key=key)
            else:
                if applies:
                    state[key] = value[1]
                done = Op(
                    type=OK if applies else FAIL, process=process, f=f, value=value, time=complete, key=key
                )
        if crashed:
            done.error = "timeout"
        events.append((invoke, 2 * seq, inv))
        events.append((complete, 2 * seq + 1, done))

    violated: list[Any] = []
    if violations:
        candidates = [op for op in ok_reads if op.value is not None]
        rng.shuffle(candidates)
        seen: set[Any] = set()
        for op in candidates:
            if op.key in seen:
                continue
            op.value = IMPOSSIBLE
            seen.add(op.key)
            violated.append(op.key)
            if len(violated) == violations:
                break
    events.sort(key=lambda e: (e[0], e[1]))
    ops = [e[2] for e in events]
    for i, op in enumerate(ops):
        op.index = i
    return ops, sorted(violated)


def write_run(
    store: Path, test_name: str, stamp: str, ops: list[Op], opts: dict[str, Any] | None = None
) -> Path:
    """Write ``ops`` as a run directory ``store/test_name/stamp`` with history.jsonl and test.json."""
    run_dir = store / test_name / stamp
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "history.jsonl", "w") as f:
        for op in ops:
            f.write(op.to_json() + "\n")
    test = {"name": test_name, "workload": "register", "nemesis": "none"}
    test.update(opts or {})
    with open(run_dir / "test.json", "w") as f:
        json.dump(test, f)
    return run_dir
