"""Property tests of the log checker: simulated correct logs are valid; each injected anomaly is found."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_history_util import Builder

from chaos.history.checkers.logcheck import LogChecker

NODES = ("n1", "n2", "n3")


def simulate(seed: int, n_ops: int, processes: int) -> tuple[Builder, list[Any], list[int]]:
    """Concurrent appends against a correct log: each takes effect (or not) between its invocation
    and completion. Returns the ops so far (no final reads), the log, and the acknowledged values."""
    rng = random.Random(seed)
    b = Builder()
    log: list[Any] = [None]  # index 0: a no-op entry
    pending: dict[int, tuple[int, str, bool]] = {}  # process -> (value, outcome, applied)
    acked: list[int] = []
    v = 0
    retired = 0
    while v < n_ops or pending:
        p = rng.randrange(processes) + retired
        if p not in pending:
            if v >= n_ops:
                p = next(iter(pending))
            else:
                outcome = rng.choices(["ok", "fail", "info"], [8, 1, 1])[0]
                pending[p] = (v, outcome, False)
                b.op("invoke", p, "append", v, dt=rng.randrange(1, 1000))
                v += 1
                continue
        val, outcome, applied = pending[p]
        if (
            not applied
            and (outcome == "ok" or (outcome == "info" and rng.random() < 0.5))
            and rng.random() < 0.7
        ):
            log.append(val)  # the linearization point
            pending[p] = (val, outcome, True)
            continue
        if outcome == "ok" and not applied:
            continue
        del pending[p]
        if outcome == "ok":
            b.op("ok", p, "append", val, dt=rng.randrange(1, 1000), log_index=log.index(val))
            acked.append(val)
        else:
            b.op(outcome, p, "append", val, dt=rng.randrange(1, 1000))
            if outcome == "info":
                retired += processes  # Jepsen retires a process after an indeterminate op
    return b, log, acked


def _finish(b: Builder, log: list[Any], rng: random.Random, tmp: Path) -> dict[str, Any]:
    for i, n in enumerate(NODES):
        cut = len(log) if i == 0 else rng.randrange(len(log) + 1)  # followers may lag
        b.read(10_000 + i, n, log[:cut])
    return LogChecker().check({}, b.write(tmp / "history.jsonl"), {})


SEEDS = st.integers(0, 2**32 - 1)


@settings(max_examples=40, deadline=None)
@given(seed=SEEDS, n=st.integers(1, 60), procs=st.integers(1, 6))
def test_correct_logs_are_valid(tmp_path_factory: Any, seed: int, n: int, procs: int) -> None:
    b, log, _ = simulate(seed, n, procs)
    r = _finish(b, log, random.Random(seed), tmp_path_factory.mktemp("h"))
    assert r["valid"] is True, r


@settings(max_examples=40, deadline=None)
@given(
    seed=SEEDS,
    n=st.integers(2, 60),
    procs=st.integers(1, 6),
    kind=st.sampled_from(["lost", "duplicated", "unexpected", "reordered"]),
)
def test_injected_anomalies_are_found(
    tmp_path_factory: Any, seed: int, n: int, procs: int, kind: str
) -> None:
    b, log, acked = simulate(seed, n, procs)
    rng = random.Random(seed)
    entries = [x for x in log if x is not None]
    if kind == "lost":
        if not acked:
            return
        victim = rng.choice(acked)
        log = [x for x in log if x != victim]
    elif kind == "duplicated":
        if not entries:
            return
        log = [*log, rng.choice(entries)]
    elif kind == "unexpected":
        log = [*log, 10**9]
    else:
        ack_pos = [i for i, x in enumerate(log) if x in set(acked)]
        if len(ack_pos) < 2:
            return
        i, j = sorted(rng.sample(ack_pos, 2))
        log = list(log)
        log[i], log[j] = log[j], log[i]
    r = _finish(b, log, rng, tmp_path_factory.mktemp("h"))
    assert r["valid"] is False
    assert r[f"{kind}_count"] >= 1, r
