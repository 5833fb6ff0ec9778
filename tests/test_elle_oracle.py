"""Elle checker against an independent brute-force reference, on thousands of generated histories.

The reference knows nothing of graphs: it searches the serial orders of the committed transactions
(plus any subset of the indeterminate ones) for one in which every ok read returns exactly what the
serial execution gives (failed transactions never apply), optionally respecting realtime order
(a completed before b was invoked: strict serializability). Elle's soundness claim is that a
reported anomaly holds in every interpretation, so when the reference finds an order the checker
must not say invalid; with a final read of every key (every committed append observed) list-append
inference is complete, so the checker must then say invalid whenever the reference finds no order.

Histories come from a sloppy store: transactions overlap, each micro-op takes effect at its own
moment (so atomicity breaks), reads may return an older prefix, failed transactions sometimes leave
their appends behind, and indeterminate ones apply or not. That plants G0, G1a, G1b, G1c, G-single,
G2, lost updates, dirty updates and realtime anomalies among valid histories.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaos.history.checkers.elle import check_ops
from chaos.history.op import Op


def generate(seed: int, *, register: bool = False) -> tuple[list[Op], bool]:
    """A small history from the sloppy store, and whether it ends with a read of every key."""
    rng = random.Random(seed)
    n = rng.randint(2, 5)
    keys = ["x", "y", "z"][: rng.randint(1, 3)]
    stale = rng.choice([0.0, 0.1, 0.3])
    atomic = rng.random() < 0.5
    counter: dict[str, int] = {}
    txns = []
    for _ in range(n):
        ms = []
        for _ in range(rng.randint(1, 3)):
            k = rng.choice(keys)
            if rng.random() < 0.5:
                ms.append(["r", k, None])
            else:
                counter[k] = counter.get(k, 0) + 1
                ms.append(["w" if register else "append", k, counter[k]])
        txns.append(ms)
    # schedule: invoke i, a moment per micro-op, complete i; interleaved at random
    events: list[tuple[str, int, int]] = []
    for i, ms in enumerate(txns):
        events.append(("inv", i, 0))
        events.extend(("mop", i, j) for j in range(len(ms)))
        events.append(("end", i, 0))
    order: list[tuple[str, int, int]] = []
    cursors = {i: 0 for i in range(n)}
    per_txn = {i: [e for e in events if e[1] == i] for i in range(n)}
    while cursors:
        i = rng.choice(sorted(cursors))
        seq = per_txn[i]
        if atomic and seq[cursors[i]][0] == "mop":
            while seq[cursors[i]][0] == "mop":
                order.append(seq[cursors[i]])
                cursors[i] += 1
        else:
            order.append(seq[cursors[i]])
            cursors[i] += 1
        if cursors[i] == len(seq):
            del cursors[i]
    outcome = [rng.choices(["ok", "fail", "info"], [0.8, 0.1, 0.1])[0] for _ in range(n)]
    applies = [
        o == "ok" or (o == "info" and rng.random() < 0.5) or (o == "fail" and rng.random() < 0.3)
        for o in outcome
    ]
    state: dict[str, Any] = {}
    done: dict[int, list[list[Any]]] = {i: [] for i in range(n)}
    history: dict[str, list[Any]] = {k: [[]] for k in keys}  # every state each key went through
    ops: list[Op] = []
    for kind, i, j in order:
        ms = txns[i]
        if kind == "inv":
            ops.append(Op("invoke", i, "txn", [[f, k, None if f == "r" else v] for f, k, v in ms]))
        elif kind == "mop":
            f, k, v = ms[j]
            if f == "r":
                if register:
                    got = state.get(k)
                    if rng.random() < stale:
                        got = rng.choice(history[k] + [None])
                else:
                    cur = list(state.get(k, []))
                    got = cur[: rng.randint(0, len(cur))] if rng.random() < stale else cur
                    got = got or None
                done[i].append(["r", k, got])
            else:
                if applies[i]:
                    if register:
                        state[k] = v
                        history[k].append(v)
                    else:
                        state.setdefault(k, []).append(v)
                done[i].append([f, k, v])
        else:
            o = outcome[i]
            val = done[i] if o == "ok" else [[f, k, None if f == "r" else v] for f, k, v in ms]
            ops.append(Op(o, i, "txn", val))
    final = rng.random() < 0.7 and not register
    if final:
        reads = [["r", k, list(state[k]) if state.get(k) else None] for k in keys]
        ops.append(Op("invoke", n, "txn", [["r", k, None] for k in keys]))
        ops.append(Op("ok", n, "txn", reads))
    for pos, op in enumerate(ops):
        op.index = op.time = pos
    return ops, final


def reference(ops: list[Op], *, realtime: bool, register: bool = False) -> bool:
    """True if some serial order of the committed txns (and any subset of the info ones) explains
    every ok read; with ``realtime``, an ok txn that completed before another was invoked must
    come first."""
    inv_at: dict[Any, int] = {}
    txns = []  # (type, invoke pos, complete pos, value)
    for pos, op in enumerate(ops):
        if op.type == "invoke":
            inv_at[op.process] = pos
        elif op.type in ("ok", "info"):
            txns.append((op.type, inv_at[op.process], pos, op.value))
    n = len(txns)
    must = [
        {a for a in range(n) if txns[a][0] == "ok" and txns[a][2] < txns[b][1]} if realtime else set()
        for b in range(n)
    ]
    oks = frozenset(i for i in range(n) if txns[i][0] == "ok")
    seen: set[tuple[frozenset[int], tuple[Any, ...]]] = set()

    def run(i: int, state: dict[str, Any]) -> dict[str, Any] | None:
        st_ = dict(state)
        kind, _, _, value = txns[i]
        for f, k, v in value:
            if f == "r":
                if kind != "ok":
                    continue
                cur = st_.get(k)
                if register:
                    if cur != v:
                        return None
                elif list(cur or []) != list(v or []):
                    return None
            elif f == "w":
                st_[k] = v
            else:
                st_[k] = (*st_.get(k, ()), v)
        return st_

    def dfs(placed: frozenset[int], state: dict[str, Any]) -> bool:
        if oks <= placed:
            return True
        key = (placed, tuple(sorted(state.items())))
        if key in seen:
            return False
        seen.add(key)
        for i in range(n):
            if i in placed or not must[i] <= placed:
                continue
            nxt = run(i, state)
            if nxt is not None and dfs(placed | {i}, nxt):
                return True
        return False

    return dfs(frozenset(), {})


VERDICTS: Counter[str] = Counter()


def _agree(seed: int, types: Counter[str] | None = None) -> None:
    ops, final = generate(seed)
    for model, realtime in (("serializable", False), ("strict-serializable", True)):
        ok = reference(ops, realtime=realtime)
        r = check_ops(ops, "list-append", model)
        if types is not None:
            types.update(r["anomaly_types"])
        VERDICTS[f"{model}:{r['valid']}"] += 1
        if ok:
            assert r["valid"] is not False, (seed, model, r["summary"], [o.to_dict() for o in ops])
        elif final:
            assert r["valid"] is False, (seed, model, r["summary"], [o.to_dict() for o in ops])


@settings(max_examples=3000, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(st.integers(min_value=0, max_value=2**40))
def test_list_append_agrees_with_brute_force(seed: int) -> None:
    _agree(seed)


def test_planted_anomalies_are_found_and_agree():
    """2,000 seeded histories: the same agreement, and the sloppy store plants every kind."""
    types: Counter[str] = Counter()
    for seed in range(2000):
        _agree(seed, types)
    for kind in (
        "G0",
        "G1a",
        "G1b",
        "G1c",
        "G-single-item",
        "G2-item",
        "internal",
        "lost-update",
        "dirty-update",
        "G-single-item-realtime",
    ):
        assert types[kind] > 0, (kind, types)


@settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(st.integers(min_value=0, max_value=2**40))
def test_rw_register_is_sound(seed: int) -> None:
    ops, _ = generate(seed, register=True)
    for model, realtime in (("serializable", False), ("strict-serializable", True)):
        if reference(ops, realtime=realtime, register=True):
            r = check_ops(ops, "rw-register", model)
            assert r["valid"] is not False, (seed, model, r["summary"], [o.to_dict() for o in ops])
