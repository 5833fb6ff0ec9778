"""Linearizability checker: a history split by key and by the model's partition, each part
searched by :func:`check_calls` with :mod:`chaos.history.checkers.wgl` (Wing & Gong with Lowe's improvements, as
porcupine does it), and for an invalid part the shortest counterexample window.

Histories are split by ``op.key`` (Jepsen ``independent``) and then by ``model.partition``
(P-compositionality, Horn & Kroening 2015); parts are checked in this process, time-sliced, and those
still open after ``POOL_AFTER`` seconds go to worker processes (unless what is left looks shorter
than ``POOL_MIN_REST`` seconds); the first invalid part cancels the rest. Crashed ops (``info`` completions and invocations
that never complete) get a return at +infinity and an ``UNKNOWN`` output (knossos
``history/preprocess``, porcupine's etcd test). ``fail`` ops are dropped (knossos), except a ``cas``
whose completion carries ``compare_failed: true``, which is a completed cas whose compare did not
match (porcupine's etcd model).
"""

from __future__ import annotations

import gc
import json
import operator
import os
import time
from collections.abc import Hashable, Iterable, Sequence
from typing import Any

from chaos.history.checkers.models import UNKNOWN, Call, Model, get_model
from chaos.history.checkers.wgl import VALID_UNKNOWN, KeyResult, _search
from chaos.history.checkers.why import register_why
from chaos.history.op import FAIL, INFO, INVOKE, NEMESIS, OK, Op

# models whose counterexamples get a sentence of why (chaos.history.checkers.why)
REGISTER_MODELS = frozenset({"register", "cas-register"})

# Parts are checked in this process first; those still open after this many seconds go to a
# pool of forked worker processes (which inherit the parts: only results are pickled).
POOL_AFTER = 0.2
# ... unless what is left looks shorter than this (seconds, at the pace of the parts done so far):
# forking a pool from a process holding a long history (its pages copied as the workers touch
# them, beside the stream checkers' child) costs more than it saves then
POOL_MIN_REST = 0.25
# First time slice (s) per part when several parts are checked in one process; x4 each round.
SLICE = 0.05
# Shrinking an invalid key's counterexample window (a few searches of parts of the key) may visit
# this many search configurations per op of the key: bounded by the key's size, and the same on a
# loaded machine as on an idle one (a time budget shrank a window on an idle machine and left it
# the whole key on a loaded one).
# porcupine's c50-bad keys (about 200 ops): 6 shrink to 4-9 ops within 1,000-7,500 configurations.
WINDOW_CONFIGS_PER_OP = 50
# ... and never for more than this many seconds.
WINDOW_TIME = 0.5
# At most this many candidate start states when shrinking a window from the front.
WINDOW_STATES = 32


def check_calls(
    calls: Sequence[Call],
    model: Model | str,
    deadline: float | None = None,
    *,
    counterexample: bool = True,
    stop: object = None,
    counterexample_deadline: float | None | str = "search",
    fresh: bool = False,
) -> KeyResult:
    """Check one partition: is there a linearization of ``calls`` under ``model``?

    Args:
        calls: the ops of one partition; ids are renumbered here, so any ids will do. Calls the model
            calls ``noop`` (e.g. reads of unknown output) are dropped first.
        model: a Model or a spec string (``chaos.history.checkers.models.get_model``).
        deadline: ``time.monotonic()`` value after which the search gives up with ``unknown``.
        counterexample: for an invalid partition, build the counterexample (longest prefix, failing
            op, smallest window; docs/design.md).
        stop: an object with ``is_set()`` (a multiprocessing Event) that cancels the search.
        counterexample_deadline: deadline for building the counterexample (default ``"search"``:
            the search's own); a search cut into time slices finds a violation inside a slice but
            shrinks its window under the whole check's deadline, without searching again.
        fresh: the calls are the caller's own, made for this check (:func:`history_calls`'s):
            they are renumbered in place rather than copied.
    Returns:
        KeyResult with ``valid`` True, False or "unknown" (``cause`` timeout/cancelled).
    Raises:
        ValueError: an op the model does not understand (names the op's index and process).
    """
    m = get_model(model)
    t0 = time.monotonic()
    cs = _renumber(calls, m, in_place=fresh)
    res = _search(cs, m, m.init(), deadline, stop)
    if res.valid is False and counterexample:
        cx_deadline = deadline if counterexample_deadline == "search" else counterexample_deadline
        res.counterexample = _counterexample(cs, m, res, cx_deadline)  # type: ignore[arg-type]
    res.seconds = time.monotonic() - t0
    return res


def _renumber(calls: Iterable[Call], m: Model, *, in_place: bool = False) -> list[Call]:
    """The calls the model does not call ``noop``, numbered 0, 1, 2, ...: copies, or (``in_place``)
    the calls themselves with their ids set."""
    noop = getattr(m, "noop", None)
    if in_place:
        kept = [c for c in calls if not noop(c)] if noop is not None else list(calls)
        for i, c in enumerate(kept):
            c.id = i
        return kept
    out: list[Call] = []
    for c in calls:
        if noop is not None and noop(c):
            continue
        out.append(Call(len(out), c.f, c.value, c.output, c.call, c.ret, c.process, c.index, c.key, c.type))
    return out


# ------------------------------------------------------------------------------------------------
# counterexamples


def _op_dict(c: Call) -> dict[str, object]:
    return {
        "id": c.id,
        "index": c.index,
        "process": c.process,
        "f": c.f,
        "value": c.value,
        "output": None if c.output is UNKNOWN else c.output,
        "call": c.call,
        "return": c.ret,
        "type": "info" if c.ret is None else "ok",
        "description": c.describe(),
    }


def _cut(calls: Sequence[Call], order: Sequence[int], lo: int, t: float) -> list[Call]:
    """The sub-history of ops called at or before time ``t``, from position ``lo`` of ``order``
    (ops sorted by call time) on, plus earlier ops still pending when op ``order[lo]`` was called.
    Ops not returned by ``t`` become pending (return +infinity, unknown output)."""
    start = calls[order[lo]].call if lo < len(order) else t
    sub: list[Call] = []
    for pos, i in enumerate(order):
        c = calls[i]
        if c.call > t:
            break
        if pos < lo and c.ret is not None and c.ret < start:
            continue
        if c.ret is None or c.ret > t:
            c = Call(c.id, c.f, c.value, UNKNOWN, c.call, None, c.process, c.index, c.key, "info")
        sub.append(c)
    return sub


def _invalid_from(
    calls: Sequence[Call], m: Model, starts: Sequence[object], deadline: float, budget: list[int]
) -> bool | None:
    """True if ``calls`` is not linearizable from any of ``starts``; None when out of time or out
    of ``budget`` (``[configurations left]``, spent by each search)."""
    sub = _renumber(calls, m)
    for s in starts:
        if budget[0] <= 0:
            return None
        r = _search(sub, m, s, deadline, track=False, max_pushes=budget[0])
        budget[0] -= max(r.configs, 1)
        if r.valid == VALID_UNKNOWN:
            return None
        if r.valid is True:
            return False
    return True


def window_budget(n_ops: int) -> int:
    """Search configurations allowed for shrinking the counterexample window of a key of
    ``n_ops`` ops: :data:`WINDOW_CONFIGS_PER_OP` per op."""
    return WINDOW_CONFIGS_PER_OP * n_ops


def _counterexample(calls: list[Call], m: Model, res: KeyResult, deadline: float | None) -> dict[str, object]:
    """Longest prefix, its states, the failing op, and a small window (docs/design.md); the
    window search stops after :func:`window_budget` configurations (or :data:`WINDOW_TIME`
    seconds, or at ``deadline``)."""
    describe = m.describe
    budget = [window_budget(len(calls))]
    t_end = time.monotonic() + WINDOW_TIME
    if deadline is not None:
        t_end = min(t_end, deadline)
    order = sorted(range(len(calls)), key=lambda i: (calls[i].call, i))
    times = sorted({c.call for c in calls} | {c.ret for c in calls if c.ret is not None})
    init = m.init()
    # 1. the earliest time cut that is already invalid (monotone: linearizability is prefix-closed)
    lo_i, hi_i = 0, len(times) - 1
    window = [c.id for c in calls]
    if res.valid is False:  # the whole key (the cut at its last time) is invalid: the search said so
        while lo_i < hi_i:
            mid = (lo_i + hi_i) // 2
            r = _invalid_from(_cut(calls, order, 0, times[mid]), m, [init], t_end, budget)
            if r is None:
                lo_i = hi_i
                break
            if r:
                hi_i = mid
            else:
                lo_i = mid + 1
        t_cut = times[hi_i]
        window = [c.id for c in _cut(calls, order, 0, t_cut)]
        # 2. drop ops from the front while the window stays invalid from every plausible start state
        starts: list[object] = list(dict.fromkeys([init, *res.states]))
        if len(res.reached) <= WINDOW_STATES:
            starts = list(dict.fromkeys([*starts, *res.reached]))
        starts = starts[-WINDOW_STATES:]
        n_in = sum(1 for i in order if calls[i].call <= t_cut)

        def probe(lo: int) -> bool | None:
            """Is the window from ``lo`` still invalid (it then becomes the window)? None: no time."""
            nonlocal window
            sub = _cut(calls, order, lo, t_cut)
            r = _invalid_from(sub, m, starts, t_end, budget)
            if r:
                window = [c.id for c in sub]
            return r

        a, b = 0, n_in - 1  # find the largest lo with the cut still invalid
        # gallop back from the cut first: the window is usually a few ops before it, and short
        # sub-histories are cheap to search, where a first probe at half the key is not
        step = 1
        while a < b and time.monotonic() < t_end and n_in - step > 0:
            r = probe(n_in - step)
            if r is None:
                break
            if r:
                a = n_in - step
                break
            b = n_in - step - 1
            step *= 2
        while a < b and time.monotonic() < t_end:
            mid = (a + b + 1) // 2
            r = probe(mid)
            if r is None:
                break
            if r:
                a = mid
            else:
                b = mid - 1
    prefix = res.prefix
    failing = res.failing
    shown = set(prefix) | set(window)
    if failing is not None:
        shown.add(failing)
        fc = calls[failing]
        fret = float("inf") if fc.ret is None else fc.ret
        for c in calls:  # ops concurrent with the failing op
            if c.call <= fret and (c.ret is None or c.ret >= fc.call):
                shown.add(c.id)
    states = [describe(s) for s in res.states]
    before = describe(res.states[len(prefix) - 1]) if prefix else describe(init)
    return {
        "ops": [_op_dict(calls[i]) for i in sorted(shown, key=lambda i: (calls[i].call, i))],
        "prefix": list(prefix),
        "states": states,
        "failing": failing,
        "failing_state": before,
        "window": sorted(window, key=lambda i: (calls[i].call, i)),
        "initial_state": describe(init),
        **({"why": register_why(calls, failing, before, init)} if m.name in REGISTER_MODELS else {}),
    }


# ------------------------------------------------------------------------------------------------
# histories: pairing, partitioning, parallel checking


def history_calls(ops: Iterable[Op]) -> tuple[dict[Any, list[Call]], int]:
    """Pair ops into calls per independent key (knossos ``history/preprocess``).

    Completions pair with the last open invocation of the same process; nemesis ops are skipped;
    ``fail`` ops are dropped unless a ``cas`` completion carries ``compare_failed: true``; ``info`` and
    never-completed invocations get ``ret=None`` and ``output=UNKNOWN``; a None invocation value is
    filled from the ok completion. Returns ({key label: [Call]}, number of client invocations); the
    label is :func:`key_label` of ``op.key``, None for unkeyed ops.

    Raises:
        ValueError: a completion without an open invocation, or two open invocations on one
            process (naming the op's index).
    """
    open_: dict[Hashable, Op] = {}
    parts: dict[Hashable, list[Call]] = {}
    invokes = 0
    pop = open_.pop
    # groups are keyed by label, not by the key: 1, 1.0, True and "1" are equal or equally
    # hashed as dict keys in Python but are different keys in the history
    simple = (int, str, float, bool)
    labels: dict[Hashable, str] = {}
    int_labels: dict[int, str] = {}
    for op in ops:
        p = op.process
        t = op.type
        if t == INVOKE:
            if p == NEMESIS:
                continue
            if p in open_:
                raise ValueError(
                    f"history: op {op.index}: process {p} invokes {op.f!r} while op "
                    f"{open_[p].index} is still open (expected a completion first)"
                )
            open_[p] = op
            invokes += 1
            continue
        inv = pop(p, None)
        if inv is None:
            if p == NEMESIS:
                continue
            raise ValueError(
                f"history: op {op.index}: {t} completion on process {p} without an open invocation"
            )
        value = inv.value
        if t == OK:
            if value is None:
                value = op.value
            out: object = True if inv.f == "cas" else op.value
            c = Call(0, inv.f, value, out, inv.time, op.time, p, inv.index, inv.key, OK)
        elif t == INFO:
            c = Call(0, inv.f, value, UNKNOWN, inv.time, None, p, inv.index, inv.key, INFO)
        elif t == FAIL:
            if inv.f == "cas" and op.extra.get("compare_failed") is True:
                c = Call(0, inv.f, value, False, inv.time, op.time, p, inv.index, inv.key, OK)
            else:
                continue
        else:
            raise ValueError(f"history: op {op.index}: unknown type {t!r} (expected invoke/ok/fail/info)")
        k = inv.key
        if type(k) is int:  # the common case: one dict lookup
            label = int_labels.get(k)
            if label is None:
                label = int_labels[k] = key_label(k)
            k = label
        elif k is not None:
            tk = (type(k), k) if type(k) in simple else None
            label = labels.get(tk) if tk is not None else None
            if label is None:
                label = key_label(k)
                if tk is not None:
                    labels[tk] = label
            k = label
        part = parts.get(k)
        if part is None:
            parts[k] = [c]
        else:
            part.append(c)
    for inv in open_.values():
        c = Call(0, inv.f, inv.value, UNKNOWN, inv.time, None, inv.process, inv.index, inv.key, INFO)
        parts.setdefault(None if inv.key is None else key_label(inv.key), []).append(c)
    return parts, invokes


def key_label(key: object) -> str:
    """The label of an independent key in results (``keys``, ``failures``, ``unknown``).

    An integer or other JSON value is labelled by its compact JSON text (``7``, ``[1,2]``, ``null``);
    a string by itself, unless that text would read as another JSON value, in which case it is
    quoted: the key ``1`` is ``1`` and the key ``"1"`` is ``"1"``, so distinct keys never share a label.
    """
    if isinstance(key, str):
        try:
            json.loads(key)
        except ValueError:
            return key
        return json.dumps(key)
    return json.dumps(key, separators=(",", ":"), default=str)


_STOP: Any = None
# the parts a forked pool's workers check, inherited with the fork (nothing pickled on the way in)
_TASKS: list[tuple[str, list[Call]]] = []


def _init_worker(stop: object) -> None:
    global _STOP
    _STOP = stop


def _check_part(
    label: str, calls: list[Call] | int, model: Model, deadline: float | None
) -> tuple[str, KeyResult]:
    if isinstance(calls, int):  # an index into the inherited _TASKS
        calls = _TASKS[calls][1]
    res = check_calls(calls, model, deadline, stop=_STOP, fresh=True)
    if res.valid is False and _STOP is not None:
        _STOP.set()
    res.reached = []
    res.states = []
    return label, res


def check_history(
    ops: Iterable[Op],
    model: Model | str = "cas-register",
    *,
    time_limit: float | None = None,
    workers: int | None = None,
    cancel_on_failure: bool = False,
) -> dict[str, object]:
    """The ``linear`` checker: is the history linearizable under ``model``, per key?

    Args:
        ops: the history (Op objects, any order of keys; times in ns or positions).
        model: a Model or spec string such as ``"cas-register"`` / ``"cas-register:init=0"``.
        time_limit: seconds for the whole check; keys not decided by then are ``unknown``.
        workers: worker processes (default: CPU count; 1 = in this process). Small histories are
            always checked in this process.
        cancel_on_failure: ``--fail-fast``: stop checking other keys at the first invalid one
            (porcupine's default); the keys left unchecked are listed in ``not_checked`` (cause
            ``cancelled``), never among the undecided. Off by default: every key is checked, as
            Jepsen's independent checker does, so every command reports the same keys.
    Returns:
        ``{"valid": True|False|"unknown", "model": str, "keys": {key: {"valid", "ops", "configs",
        ["cause"], ["counterexample"]}}, "failures": [keys], "unknown": [keys], "ops": n,
        "seconds": s}`` (docs/design.md). Keys are labelled by :func:`key_label` (distinct keys, distinct labels); an unkeyed history is one part
        named ``"all"`` unless the model partitions it (``"0"``, ``"1"``, ...).
    Raises:
        ValueError: bad model spec, malformed pairing, or an op the model does not understand.
    """
    t0 = time.monotonic()
    m = get_model(model)
    deadline = None if time_limit is None else t0 + time_limit
    tasks, invokes = _tasks(ops, m)
    nworkers = workers if workers is not None else (os.cpu_count() or 1)
    pooled = nworkers > 1 and len(tasks) > 1
    results = _run_sliced(tasks, m, deadline, cancel_on_failure, POOL_AFTER if pooled else None)
    rest = [t for t in tasks if t[0] not in results]
    if rest:
        results.update(_run_pool(rest, m, deadline, min(nworkers, len(rest)), cancel_on_failure))
    results = {label: results[label] for label, _ in tasks}  # in key order, however they finished
    return _summary(results, m, invokes, time.monotonic() - t0)


def _tasks(ops: Iterable[Op], m: Model) -> tuple[list[tuple[str, list[Call]]], int]:
    """The parts to search, ``(label, calls sorted by call time)`` in key order, and the number of
    client invocations. The cyclic garbage collector is paused meanwhile: a call per op is made
    and kept, none in a cycle, and each collection would scan the whole history's ops again (a
    third of this step's time on a 100k-op history)."""
    was = gc.isenabled()
    gc.disable()
    try:
        groups, invokes = history_calls(ops)
        tasks: list[tuple[str, list[Call]]] = []
        keyed = any(k is not None for k in groups)
        by_time = operator.attrgetter("call", "index")
        for k in sorted(groups, key=lambda k: (k is None, k or "")):
            calls = groups[k]
            calls.sort(key=by_time)
            parts = m.partition(calls)
            base = ("null" if k is None else k) if keyed else "all"
            if len(parts) == 1:
                tasks.append((base, parts[0]))
            else:
                for i, part in enumerate(parts):
                    tasks.append((f"{base}/{i}" if keyed else str(i), part))
        return tasks, invokes
    finally:
        if was:
            gc.enable()


def _run_sliced(
    tasks: list[tuple[str, list[Call]]],
    m: Model,
    deadline: float | None,
    cancel: bool,
    budget: float | None = None,
) -> dict[str, KeyResult]:
    """Check parts in this process, round-robin with growing time slices (restarting a part's
    search each round), so one hard part cannot hide a quick violation in another (porcupine checks
    parts concurrently for the same reason). With ``budget`` (seconds), parts not decided by then
    are left out of the result (for a pool to finish), unless every part of the first round so far
    was decided within its slice and the rest, at that pace, would take under
    :data:`POOL_MIN_REST` seconds: then they are checked here too."""
    results: dict[str, KeyResult] = {}
    pending = list(tasks)
    slice_ = SLICE
    t0 = time.monotonic()
    t_budget = None if budget is None else t0 + budget
    done_ops, all_ops = 0, sum(len(calls) for _, calls in tasks)
    while pending:
        again: list[tuple[str, list[Call]]] = []
        for label, calls in pending:
            now = time.monotonic()
            if t_budget is not None and now > t_budget and not (cancel and _any_invalid(results)):
                # the rest (this part, the later ones, ``again``) go to the pool, unless the
                # first round went well so far and what is left looks short at that pace
                rest = (now - t0) * (all_ops - done_ops) / done_ops if done_ops else POOL_MIN_REST
                if again or slice_ != SLICE or rest >= POOL_MIN_REST:
                    return results
                t_budget = None
            if deadline is not None and now > deadline:
                results[label] = KeyResult(VALID_UNKNOWN, len(calls), cause="timeout")
                continue
            if cancel and _any_invalid(results):
                results[label] = KeyResult(VALID_UNKNOWN, len(calls), cause="cancelled")
                continue
            last = len(pending) == 1 and not again
            d = None if last else now + slice_
            if deadline is not None:
                d = deadline if d is None else min(d, deadline)
            # a violation found inside a slice is definite: its counterexample is built at once,
            # under the whole check's deadline, not by searching the key again
            r = check_calls(calls, m, d, counterexample_deadline=deadline, fresh=True)
            if r.valid == VALID_UNKNOWN and r.cause == "timeout" and d != deadline:
                again.append((label, calls))
                continue
            r.reached = []
            results[label] = r
            done_ops += len(calls)
        pending = again
        slice_ *= 4
    return results


def _any_invalid(results: dict[str, KeyResult]) -> bool:
    return any(r.valid is False for r in results.values())


def _run_pool(
    tasks: list[tuple[str, list[Call]]], m: Model, deadline: float | None, nworkers: int, cancel: bool
) -> dict[str, KeyResult]:
    import concurrent.futures as cf  # only for a pool: spared at the start-up of a small check
    import multiprocessing

    global _TASKS
    forked = hasattr(os, "fork")
    ctx = multiprocessing.get_context("fork") if forked else multiprocessing.get_context()
    stop = ctx.Event()
    results: dict[str, KeyResult] = {}
    # biggest parts first, so one slow key does not start last
    order = sorted(tasks, key=lambda t: -len(t[1]))
    if forked:
        _TASKS = order  # the workers are forked at the first submit and inherit the parts
    try:
        with cf.ProcessPoolExecutor(
            max_workers=nworkers,
            mp_context=ctx,
            initializer=_init_worker,
            initargs=(stop if cancel else None,),
        ) as ex:
            futs = {
                ex.submit(_check_part, label, i if forked else calls, m, deadline): (label, len(calls))
                for i, (label, calls) in enumerate(order)
            }
            _gather(futs, results, stop, cancel)
    finally:
        _TASKS = []
    for label, calls in tasks:
        if label not in results:
            results[label] = KeyResult(VALID_UNKNOWN, len(calls), cause="cancelled")
    return results


def _gather(futs: dict[Any, tuple[str, int]], results: dict[str, KeyResult], stop: Any, cancel: bool) -> None:
    """Each finished part's result into ``results``; with ``cancel``, the first invalid part sets
    ``stop`` and cancels the parts not started."""
    import concurrent.futures as cf

    for fut in cf.as_completed(futs):
        if fut.cancelled():
            continue
        label, r = fut.result()
        results[label] = r
        if r.valid is False and cancel:
            stop.set()
            for f2 in futs:
                f2.cancel()


def _summary(results: dict[str, KeyResult], m: Model, invokes: int, seconds: float) -> dict[str, object]:
    failures = [k for k, r in results.items() if r.valid is False]
    not_checked = [k for k, r in results.items() if r.cause == "cancelled"]
    # anything not decided True or False is undecided, whatever object the verdict arrived as
    unknown = [
        k
        for k, r in results.items()
        if r.valid is not True and r.valid is not False and r.cause != "cancelled"
    ]
    valid: bool | str = False if failures else (VALID_UNKNOWN if unknown or not_checked else True)
    out: dict[str, object] = {
        "valid": valid,
        "model": getattr(m, "name", type(m).__name__),
        "keys": {k: r.to_dict() for k, r in results.items()},
        "failures": failures,
        "unknown": unknown,
        "ops": invokes,
        "seconds": round(seconds, 6),
    }
    if not_checked:  # only with cancel_on_failure, after a violation: the verdict is False anyway
        out["not_checked"] = not_checked
    if any(r.cause == "timeout" for r in results.values()):
        out["cause"] = "timeout"
    return out
