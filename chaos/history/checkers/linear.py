"""Linearizability checker: Wing & Gong search with Lowe's improvements, as porcupine does it.

The search (``checkSingle`` in porcupine's ``checker.go``; Lowe, "Testing for Linearizability",
2017) walks a doubly linked list of call and return entries sorted by time. At a call entry it tries
to linearize that op next: if the model accepts it and the pair (set of linearized ops, new state) is
not in the cache, it pushes the op, lifts the op's call and return entries out of the list and starts
again from the head. Reaching a return entry means an op that must already have happened is still
unlinearized: backtrack (pop, restore state, unlift). An empty list means linearizable; backtracking
past the first op means not.

Made fast for CPython: entries are ints indexing flat lists (``nxt``/``prv``), the linearized set is
an int bitset, model states are interned to small ints, every (op, state) transition is computed by
the model once and memoised, and the cache is one ``set`` of bitsets per interned state.

Beyond porcupine, each of these cuts branches without changing a verdict (tests/test_linear_checker.py
checks them against a brute-force search):

- a read of a known value (``model.observation``) that is legal in the current config is the only
  branch tried there (it can move to the front of any linearization);
- a crashed op is never linearized where it changes nothing (it can as well go at the very end), and
  the search succeeds once every op with a return is linearized;
- with ``model.extends`` (kv, append-log, set: states only grow between puts), a config is dropped as
  soon as some read in or just past the window can no longer reach the value it observed;
- at each new config the op whose return comes first is tried first (Lowe's JIT order).

Histories are split by ``op.key`` (Jepsen ``independent``) and then by ``model.partition``
(P-compositionality, Horn & Kroening 2015); parts are checked in this process, time-sliced, and those
still open after ``POOL_AFTER`` seconds go to worker processes; the first invalid part cancels the
rest. Crashed ops (``info`` completions and invocations
that never complete) get a return at +infinity and an ``UNKNOWN`` output (knossos
``history/preprocess``, porcupine's etcd test). ``fail`` ops are dropped (knossos), except a ``cas``
whose completion carries ``compare_failed: true``, which is a completed cas whose compare did not
match (porcupine's etcd model).
"""

from __future__ import annotations

import bisect
import gc
import json
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from chaos.history.models import UNKNOWN, BaseModel, Call, Model, get_model
from chaos.history.op import FAIL, INFO, INVOKE, NEMESIS, OK, Op
from chaos.history.why import register_why

# models whose counterexamples get a sentence of why (chaos.history.why)
REGISTER_MODELS = frozenset({"register", "cas-register"})

# The undecided verdict. Verdicts cross process boundaries (pickled results from the pool), so
# they are always compared by value (``==``), never by identity.
VALID_UNKNOWN = "unknown"

# Parts are checked in this process first; those still open after this many seconds go to a
# pool of forked worker processes (which inherit the parts: only results are pickled).
POOL_AFTER = 0.2
# With model.extends: also check this many reads past the first pending return at each config,
LOOKAHEAD = 2
# ... walking at most this many list entries for them;
LOOK_ENTRIES = 64
# ... and every read in the list once a search has pushed this many configs (costlier per config,
# but an invalid history then fails fast: kv/c50-bad keys 0, 7, 9 in 12-14 configs).
LOOK_ALL_AFTER = 8192
# ... within this many list entries (bounds the cost per config on long histories).
LOOK_ALL_ENTRIES = 256
# With model.resets: puts looked at per read when deciding which could still lead to its value.
PUTS_SEEN = 32
# Give up (unknown, cause "memory") past this many cached configurations in one search (~100 B each).
MAX_CONFIGS = 10_000_000
# First time slice (s) per part when several parts are checked in one process; x4 each round.
SLICE = 0.05
# Memoised transitions kept, in (state, op) entries, per search.
ROW_BUDGET = 4_000_000
# Seconds spent at most on shrinking a counterexample's window.
WINDOW_TIME = 0.5
# The window's budget is proportional to the key: this many seconds per op of the key (at least
# WINDOW_FLOOR, at least the key's own search time, at most WINDOW_TIME), so shrinking never
# dominates the check of a history with many small invalid keys. The floor lets a key of a few
# hundred ops shrink its window on a loaded machine (at 5 ms, a 240-op key's window stayed the whole
# key, and the report opened the key at its first op).
WINDOW_PER_OP = 20e-6
WINDOW_FLOOR = 0.1
# At most this many candidate start states when shrinking a window from the front.
WINDOW_STATES = 32


@dataclass
class KeyResult:
    """Result for one partition: ``valid`` True/False/"unknown", the counterexample when False.

    ``configs`` is the number of (linearized set, state) configurations the search visited;
    ``cause`` says why a result is unknown (``timeout`` or ``cancelled``).
    """

    valid: bool | str
    ops: int = 0
    configs: int = 0
    seconds: float = 0.0
    cause: str | None = None
    counterexample: dict[str, Any] | None = None
    # internal: longest prefix (op ids), states after each (interned objects), failing op id
    prefix: list[int] = field(default_factory=list)
    states: list[Any] = field(default_factory=list)
    failing: int | None = None
    reached: list[Any] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"valid": self.valid, "ops": self.ops, "configs": self.configs}
        if self.cause:
            d["cause"] = self.cause
        if self.counterexample is not None:
            d["counterexample"] = self.counterexample
        return d


class _Stop(Exception):
    pass


# ------------------------------------------------------------------------------------------------
# the search


def _search(*args: Any, **kwargs: Any) -> KeyResult:
    """WGL search over ``calls`` (ids must be 0..n-1) from state ``init``, with the cyclic garbage
    collector paused: the search allocates many containers and none of them form cycles."""
    was = gc.isenabled()
    gc.disable()
    try:
        return _wgl(*args, **kwargs)
    finally:
        if was:
            gc.enable()


def _wgl(
    calls: Sequence[Call],
    model: Model,
    init: Any,
    deadline: float | None = None,
    stop: Any = None,
    track: bool = True,
) -> KeyResult:
    """WGL search over ``calls`` (ids must be 0..n-1) from state ``init``: the tables, then the walk."""
    n = len(calls)
    if n == 0:
        return KeyResult(True)
    ops = _OpTables(calls, model)
    if ops.left == 0:
        return KeyResult(True, n)
    space = _Space(calls, model, init)
    live_reads = _read_pruner(calls, model, ops, space)
    return _walk(ops, space, live_reads, _Limits(deadline, stop), track)


def _entry_list(calls: Sequence[Call]) -> tuple[list[int], list[int]]:
    """The doubly linked list of call and return entries in time order, as ``(nxt, prv)``.

    Entry ``i`` is op i's call, ``n + i`` its return (+infinity for a crashed op), ``2n`` the head
    and ``2n + 1`` the tail; ties put calls before returns (porcupine's ``makeEntries``)."""
    n = len(calls)
    inf = float("inf")
    events: list[tuple[float, int, int]] = []
    for c in calls:
        events.append((c.call, 0, c.id))
        events.append((inf if c.ret is None else c.ret, 1, c.id))
    events.sort()
    head, tail = 2 * n, 2 * n + 1
    nxt = [0] * (2 * n + 2)
    prv = [0] * (2 * n + 2)
    last = head
    for _, kind, i in events:
        e = i if kind == 0 else n + i
        nxt[last] = e
        prv[e] = last
        last = e
    nxt[last] = tail
    prv[tail] = last
    return nxt, prv


class _OpTables:
    """The entry list (``nxt``/``prv``, see :func:`_entry_list`) and per-op flat tables (indexed by
    op id) the walk reads.

    ``bits[i]`` is op i's bit in the linearized set. Crashed ops (unknown output, return +infinity)
    are always legal (models.py) and can take effect at the very end: they need never be linearized
    where they change nothing, and the search succeeds once every op with a return (``fin[i]`` 1,
    ``left`` of them) is linearized. ``ro[i]``: op i is read-only (``model.readonly``), so once it is
    linearized and its subtree fails, its parent config fails too. ``pre[i]``: identical crashed ops
    (same f, value and key) are interchangeable and go in call order only; the bit of the previous one.
    """

    __slots__ = ("nxt", "prv", "bits", "crashed", "fin", "left", "ro", "pre")

    def __init__(self, calls: Sequence[Call], model: Model) -> None:
        n = len(calls)
        self.nxt, self.prv = _entry_list(calls)
        self.bits = [1 << i for i in range(n)]
        self.crashed = [c.ret is None and c.output is UNKNOWN for c in calls]
        self.fin = [0 if x else 1 for x in self.crashed]
        self.left = sum(self.fin)
        ro_fn = getattr(model, "readonly", None)
        self.ro = [bool(ro_fn(c)) for c in calls] if ro_fn is not None else [False] * n
        self.pre = [0] * n
        last_same: dict[Any, int] = {}
        for c in sorted(calls, key=lambda c: (c.call, c.id)):
            if self.crashed[c.id]:
                try:
                    k = (c.f, _hashable(c.value), _hashable(c.key))
                    hash(k)
                except TypeError:
                    continue
                if k in last_same:
                    self.pre[c.id] = self.bits[last_same[k]]
                last_same[k] = c.id


class _Space:
    """The model states met so far, interned to small ints (sids), and per state the search cache
    and the memoised transitions.

    ``caches[sid]`` is the set of linearized bitsets seen with state sid. ``rows[sid][op]`` is op's
    memoised transition from sid: the next sid, -1 illegal, -2 not yet known. Rows are kept for at
    most ROW_BUDGET entries in all; past that a row lives only while its state is current (models
    whose states rarely repeat, such as kv strings, gain nothing from keeping).

    Reads of a known value (``model.observation``) are legal in one state only: that state is
    interned up front (``obs[op]`` its sid, -3 for other ops) and their transitions are filled into
    every new row from a template, so the model's step is never called for them.
    """

    __slots__ = (
        *("calls", "step", "states", "intern", "caches", "rows", "keep"),
        *("template", "obs", "obs_at"),
    )

    def __init__(self, calls: Sequence[Call], model: Model, init: Any) -> None:
        n = len(calls)
        self.calls = calls
        self.step = model.step
        self.states: list[Any] = []
        self.intern: dict[Any, int] = {}
        self.caches: list[set[int]] = []
        self.rows: list[list[int] | None] = []
        self.keep = ROW_BUDGET // n
        self.template = [-2] * n
        self.obs = [-3] * n
        self.obs_at: dict[int, list[int]] = {}
        self.add(init)
        obs_fn = getattr(model, "observation", None)
        if obs_fn is not None:
            for c in calls:
                ob = obs_fn(c)
                if ob is not None:
                    sid = self.add(ob[0])
                    self.template[c.id] = -1
                    self.obs[c.id] = sid
                    self.obs_at.setdefault(sid, []).append(c.id)

    def add(self, state: Any) -> int:
        """The sid of ``state``, interning it (with an empty cache and no row) if new."""
        sid = self.intern.get(state, -9)
        if sid == -9:
            sid = len(self.states)
            self.intern[state] = sid
            self.states.append(state)
            self.caches.append(set())
            self.rows.append(None)
        return sid

    def new_row(self, sid: int) -> list[int]:
        """A fresh row for state sid, kept in ``rows`` while the row budget lasts."""
        row = self.template[:]
        for i in self.obs_at.get(sid, ()):
            row[i] = sid
        if self.keep > 0:
            self.keep -= 1
            self.rows[sid] = row
        return row

    def configs(self) -> int:
        """Configurations visited: (linearized set, state) pairs in the caches."""
        return sum(len(c) for c in self.caches)


class _Limits:
    """When a search gives up: past the deadline (``time.monotonic()``), when ``stop.is_set()``, or
    past MAX_CONFIGS pushes. Checked every 1024 pushes."""

    __slots__ = ("deadline", "stop")

    def __init__(self, deadline: float | None, stop: Any) -> None:
        self.deadline = deadline
        self.stop = stop

    def cause(self, pushes: int) -> str | None:
        """None to go on, else the unknown verdict's cause: cancelled, memory or timeout."""
        if self.stop is not None and self.stop.is_set():
            return "cancelled"
        if pushes > MAX_CONFIGS:
            return "memory"
        if self.deadline is not None and time.monotonic() > self.deadline:
            return "timeout"
        return None


class _Longest:
    """The longest linearized prefix a search reached (op ids and the sids after each) and the op
    whose return stopped it: the counterexample's prefix, states and failing op."""

    __slots__ = ("ops", "sids", "failing")

    def __init__(self) -> None:
        self.ops: list[int] = []
        self.sids: list[int] = []
        self.failing: int | None = None

    def record(self, stack_e: list[int], stack_s: list[int], state: int, failing: int) -> int:
        """Note the current stack (``~op`` entries unmarked) as the longest; returns its length."""
        self.ops = [x if x >= 0 else ~x for x in stack_e]
        self.sids = stack_s[1:]
        if stack_e:
            self.sids.append(state)
        self.failing = failing
        return len(stack_e)

    def result(self, valid: bool | str, space: _Space, cause: str | None = None) -> KeyResult:
        """The search's KeyResult: ``valid``, configs visited, this prefix and failing op."""
        res = KeyResult(valid, len(space.calls), space.configs(), cause=cause)
        res.prefix = list(self.ops)
        res.states = [space.states[s] for s in self.sids]
        res.failing = self.failing
        if valid is False:
            res.reached = space.states  # every state met: candidate starts for the counterexample window
        return res


def _read_needs(calls: Sequence[Call], model: Model, ops: _OpTables, space: _Space, ext_fn: Any) -> list[int]:
    """``need[r]`` for each read r of a known value: the bitset of ops that could still change the
    state other than by growing it (a put, a cas) and might run before r returns. Once all of them
    are linearized the state must grow (``model.extends``) into r's observed state.

    A put of a value that does not extend to what r saw cannot help r; only the last PUTS_SEEN puts
    called before r returns are looked at (keeping more in ``need[r]`` is always sound, and older
    puts are linearized by the time r matters)."""
    bits, obs, states = ops.bits, space.obs, space.states
    mono_fn = getattr(model, "monotone", None)
    resets_fn = getattr(model, "resets", None)
    grow = sorted(
        (c.call, c.id) for c in calls if not ops.ro[c.id] and not (mono_fn is not None and mono_fn(c))
    )
    cum = [0]
    for _, i in grow:
        cum.append(cum[-1] | bits[i])
    grow_calls = [t for t, _ in grow]
    puts: list[tuple[int, Any]] = []
    put_calls: list[float] = []
    if resets_fn is not None:
        for tc, i in grow:
            rs = resets_fn(calls[i])
            if rs is not None:
                puts.append((i, rs[0]))
                put_calls.append(tc)
    need = [0] * len(calls)
    for c in calls:
        t = obs[c.id]
        if t >= 0:
            if c.ret is None:
                nd, hi = cum[-1], len(puts)
            else:
                nd = cum[bisect.bisect_right(grow_calls, c.ret)]
                hi = bisect.bisect_right(put_calls, c.ret)
            for i, v in puts[max(0, hi - PUTS_SEEN) : hi]:
                if not ext_fn(v, states[t]):
                    nd &= ~bits[i]
            need[c.id] = nd
    return need


_LiveReads = Callable[[int, int, int, int, int], int]


class _Reach(dict[int, bool]):
    """``reach[state * base + t]``: can sid ``state`` still grow into the observed sid ``t``
    (``model.extends``)? Asked of the model once per pair (``base`` bounds the observed sids)."""

    def __init__(self, extends: Callable[[Any, Any], bool], states: list[Any], base: int) -> None:
        super().__init__()
        self.extends = extends
        self.states = states
        self.base = base

    def __missing__(self, key: int) -> bool:
        state, t = divmod(key, self.base)
        ok = self[key] = bool(self.extends(self.states[state], self.states[t]))
        return ok


def _read_pruner(calls: Sequence[Call], model: Model, ops: _OpTables, space: _Space) -> _LiveReads | None:
    """With ``model.extends`` (kv, append-log, set: states only grow between puts) and reads of
    known values, the scan of a new config: ``live_reads(f, state, lin, look_reads, look_entries)``
    walks the window from entry f and returns the first read legal in ``state`` or the first return
    entry, or ``~(r + n)`` for a read r that can no longer reach the value it observed (the config
    fails as if r's return were reached). Past the window it also looks at ``look_reads`` reads,
    walking at most ``look_entries`` entries: they cannot run yet, but may be dead already.
    None when there is nothing to prune."""
    ext_fn = getattr(model, "extends", None)
    if ext_fn is None or getattr(ext_fn, "__func__", None) is BaseModel.extends or not space.obs_at:
        return None
    need = _read_needs(calls, model, ops, space, ext_fn)
    n = len(calls)
    tail = 2 * n + 1
    nxt, obs = ops.nxt, space.obs
    base = len(space.states)  # every observed sid is below base: state * base + t names (state, t)
    reach = _Reach(ext_fn, space.states, base)

    # called once per config: the tables are bound as defaults, which CPython reads as fast locals
    def live_reads(
        f: int, state: int, lin: int, look_reads: int, look_entries: int,
        n: int = n, obs: list[int] = obs, need: list[int] = need, nxt: list[int] = nxt, tail: int = tail,
        base: int = base, reach: _Reach = reach,
    ) -> int:  # fmt: skip
        while f < n:
            t = obs[f]
            if t == state:
                return f
            if t >= 0:
                nd = need[f]
                if lin & nd == nd and not reach[state * base + t]:
                    return ~(f + n)
            f = nxt[f]
        if not look_reads:
            return f
        g = f
        steps = look_entries
        while g != tail:
            steps -= 1
            if steps == 0:
                break
            if g < n:
                t = obs[g]
                if t >= 0:
                    nd = need[g]
                    if lin & nd == nd and t != state and not reach[state * base + t]:
                        return ~(g + n)
                    look_reads -= 1
                    if look_reads == 0:
                        break
            g = nxt[g]
        return f

    return live_reads


def _walk(
    ops: _OpTables, space: _Space, live_reads: _LiveReads | None, limits: _Limits, track: bool
) -> KeyResult:
    """The search loop (porcupine's ``checkSingle``; the cuts in the module docstring). ``e`` walks
    the entry list, ``lin`` is the linearized bitset, ``state`` the current sid; the stacks hold the
    linearized ops (``~op`` when tried first at a new config) and the sids before them."""
    n = len(ops.bits)
    head, tail = 2 * n, 2 * n + 1
    nxt, prv, bits, fin, pre, ro, left = ops.nxt, ops.prv, ops.bits, ops.fin, ops.pre, ops.ro, ops.left
    crashed, calls, step, intern, add = ops.crashed, space.calls, space.step, space.intern, space.add
    obs, states, caches, rows, new_row = space.obs, space.states, space.caches, space.rows, space.new_row
    longest, best = _Longest(), -1
    stack_e: list[int] = []
    stack_s: list[int] = []
    push, push_s, pop, pop_s = stack_e.append, stack_s.append, stack_e.pop, stack_s.pop
    lin = state = pushes = 0
    row = new_row(0)
    budget, look_reads, look_entries = 1024, LOOKAHEAD, LOOK_ENTRIES
    scan = e = tail + 1  # e == scan: a config just entered
    while True:
        if e < n:  # a call entry: try to linearize op e, else go on to the next entry
            o = tag = e
            e = nxt[e]
        elif e == scan:
            f = nxt[head]
            if live_reads is not None:
                f = live_reads(f, state, lin, look_reads, look_entries)
                if f < 0:
                    e = ~f  # a read cannot be satisfied any more: as if its return were reached
                    continue
            else:
                while f < n and obs[f] != state:
                    f = nxt[f]
            if f < n:  # a legal read: the only branch tried
                o = tag = f
                e = tail  # if this config was seen, it fails: backtrack
            else:  # the op whose return comes first, then all from the head (etcd: 83k -> 26k configs)
                o = f - n
                tag = ~o
                e = nxt[head]
        else:  # a return entry: some op that must be linearized by now is not
            if track and len(stack_e) > best and e != tail:
                best = longest.record(stack_e, stack_s, state, e - n)
            if not stack_e:
                return longest.result(False, space)
            o = pop()
            first = o < 0
            o = ~o if first else o
            was, state = state, pop_s()
            lin ^= bits[o]
            left += fin[o]
            r = o + n  # unlift: return entry first, then the call (reverse of lift)
            nxt[prv[r]] = prv[nxt[r]] = r
            nxt[prv[o]] = prv[nxt[o]] = o
            if ro[o] and was == state:
                e = tail  # backtrack again: the parent config fails too
                continue
            if was != state:
                row = rows[state] or new_row(state)
            e = nxt[head] if first else nxt[o]
            continue
        ns = row[o]  # linearize op o next, if legal here and the new config is new
        if ns == -2:  # not yet known: ask the model
            ok, new = step(states[state], calls[o])
            ns = intern.get(new, -9) if ok else -1
            if ns == -9:
                ns = add(new)
            elif ns == state and crashed[o]:
                ns = -1  # a crashed op with no effect here can as well go at the very end
            row[o] = ns
        if ns < 0 or lin & pre[o] != pre[o]:
            continue
        nl = lin | bits[o]
        seen = caches[ns]
        if nl in seen:
            continue
        seen.add(nl)
        push(tag)
        push_s(state)
        left -= fin[o]
        lin = nl
        if ns != state:
            state = ns
            row = rows[ns] or new_row(ns)
        r = o + n  # lift the call and its return entry
        nxt[prv[o]], prv[nxt[o]] = nxt[o], prv[o]
        nxt[prv[r]], prv[nxt[r]] = nxt[r], prv[r]
        if left == 0:
            return KeyResult(True, n, space.configs(), prefix=[x if x >= 0 else ~x for x in stack_e])
        if e != tail and tag >= 0:  # count pushes from call entries only (as the limits were tuned)
            budget -= 1
        e = scan
        if budget == 0:
            budget = 1024
            pushes += 1024
            if pushes >= LOOK_ALL_AFTER:
                look_reads, look_entries = n, LOOK_ALL_ENTRIES
            cause = limits.cause(pushes)
            if cause is not None:
                return longest.result(VALID_UNKNOWN, space, cause)


def check_calls(
    calls: Sequence[Call],
    model: Model | str,
    deadline: float | None = None,
    *,
    counterexample: bool = True,
    stop: Any = None,
    counterexample_deadline: float | None | str = "search",
) -> KeyResult:
    """Check one partition: is there a linearization of ``calls`` under ``model``?

    Args:
        calls: the ops of one partition; ids are renumbered here, so any ids will do. Calls the model
            calls ``noop`` (e.g. reads of unknown output) are dropped first.
        model: a Model or a spec string (``chaos.history.models.get_model``).
        deadline: ``time.monotonic()`` value after which the search gives up with ``unknown``.
        counterexample: for an invalid partition, build the counterexample (longest prefix, failing
            op, smallest window; docs/design.md).
        stop: an object with ``is_set()`` (a multiprocessing Event) that cancels the search.
        counterexample_deadline: deadline for building the counterexample (default ``"search"``:
            the search's own); a search cut into time slices finds a violation inside a slice but
            shrinks its window under the whole check's deadline, without searching again.
    Returns:
        KeyResult with ``valid`` True, False or "unknown" (``cause`` timeout/cancelled).
    Raises:
        ValueError: an op the model does not understand (names the op's index and process).
    """
    m = get_model(model)
    t0 = time.monotonic()
    cs = _renumber(calls, m)
    res = _search(cs, m, m.init(), deadline, stop)
    if res.valid is False and counterexample:
        searched = time.monotonic() - t0
        cx_deadline = deadline if counterexample_deadline == "search" else counterexample_deadline
        res.counterexample = _counterexample(cs, m, res, cx_deadline, searched)  # type: ignore[arg-type]
    res.seconds = time.monotonic() - t0
    return res


def _renumber(calls: Iterable[Call], m: Model) -> list[Call]:
    noop = getattr(m, "noop", None)
    out: list[Call] = []
    for c in calls:
        if noop is not None and noop(c):
            continue
        out.append(Call(len(out), c.f, c.value, c.output, c.call, c.ret, c.process, c.index, c.key, c.type))
    return out


# ------------------------------------------------------------------------------------------------
# counterexamples


def _op_dict(c: Call) -> dict[str, Any]:
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


def _invalid_from(calls: Sequence[Call], m: Model, starts: Sequence[Any], deadline: float) -> bool | None:
    """True if ``calls`` is not linearizable from any of ``starts``; None when out of time."""
    sub = _renumber(calls, m)
    for s in starts:
        r = _search(sub, m, s, deadline, track=False)
        if r.valid == VALID_UNKNOWN:
            return None
        if r.valid is True:
            return False
    return True


def window_budget(n_ops: int, searched: float = 0.0) -> float:
    """Seconds allowed for shrinking the counterexample window of a key of ``n_ops`` ops whose
    search took ``searched`` seconds: proportional to the key, never over :data:`WINDOW_TIME`."""
    return min(WINDOW_TIME, max(WINDOW_FLOOR, WINDOW_PER_OP * n_ops, searched))


def _counterexample(
    calls: list[Call], m: Model, res: KeyResult, deadline: float | None, searched: float = 0.0
) -> dict[str, Any]:
    """Longest prefix, its states, the failing op, and a small window (docs/design.md); the
    window search stops after :func:`window_budget` seconds."""
    describe = m.describe
    t_end = time.monotonic() + window_budget(len(calls), searched)
    if deadline is not None:
        t_end = min(t_end, deadline)
    order = sorted(range(len(calls)), key=lambda i: (calls[i].call, i))
    times = sorted({c.call for c in calls} | {c.ret for c in calls if c.ret is not None})
    init = m.init()
    # 1. the earliest time cut that is already invalid (monotone: linearizability is prefix-closed)
    lo_i, hi_i = 0, len(times) - 1
    window = [c.id for c in calls]
    if _invalid_from(_cut(calls, order, 0, times[hi_i]), m, [init], t_end):
        while lo_i < hi_i:
            mid = (lo_i + hi_i) // 2
            r = _invalid_from(_cut(calls, order, 0, times[mid]), m, [init], t_end)
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
        starts: list[Any] = list(dict.fromkeys([init, *res.states]))
        if len(res.reached) <= WINDOW_STATES:
            starts = list(dict.fromkeys([*starts, *res.reached]))
        starts = starts[-WINDOW_STATES:]
        n_in = sum(1 for i in order if calls[i].call <= t_cut)

        def probe(lo: int) -> bool | None:
            """Is the window from ``lo`` still invalid (it then becomes the window)? None: no time."""
            nonlocal window
            sub = _cut(calls, order, lo, t_cut)
            r = _invalid_from(sub, m, starts, t_end)
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
    open_: dict[Any, Op] = {}
    parts: dict[Any, list[Call]] = {}
    invokes = 0
    pop = open_.pop
    # groups are keyed by label, not by the key: 1, 1.0, True and "1" are equal or equally
    # hashed as dict keys in Python but are different keys in the history
    simple = (int, str, float, bool)
    labels: dict[Any, str] = {}
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
            out: Any = True if inv.f == "cas" else op.value
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
        if k is not None:
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


def _hashable(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    return v


def key_label(key: Any) -> str:
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


def _init_worker(stop: Any) -> None:
    global _STOP
    _STOP = stop


def _check_part(
    label: str, calls: list[Call] | int, model: Model, deadline: float | None
) -> tuple[str, KeyResult]:
    if isinstance(calls, int):  # an index into the inherited _TASKS
        calls = _TASKS[calls][1]
    res = check_calls(calls, model, deadline, stop=_STOP)
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
) -> dict[str, Any]:
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
    groups, invokes = history_calls(ops)
    tasks: list[tuple[str, list[Call]]] = []
    keyed = any(k is not None for k in groups)
    for k in sorted(groups, key=lambda k: (k is None, k or "")):
        calls = groups[k]
        calls.sort(key=lambda c: (c.call, c.index))
        parts = m.partition(calls)
        base = ("null" if k is None else k) if keyed else "all"
        if len(parts) == 1:
            tasks.append((base, parts[0]))
        else:
            for i, part in enumerate(parts):
                tasks.append((f"{base}/{i}" if keyed else str(i), part))
    nworkers = workers if workers is not None else (os.cpu_count() or 1)
    pooled = nworkers > 1 and len(tasks) > 1
    results = _run_sliced(tasks, m, deadline, cancel_on_failure, POOL_AFTER if pooled else None)
    rest = [t for t in tasks if t[0] not in results]
    if rest:
        results.update(_run_pool(rest, m, deadline, min(nworkers, len(rest)), cancel_on_failure))
    results = {label: results[label] for label, _ in tasks}  # in key order, however they finished
    return _summary(results, m, invokes, time.monotonic() - t0)


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
    are left out of the result (for a pool to finish)."""
    results: dict[str, KeyResult] = {}
    pending = list(tasks)
    slice_ = SLICE
    t_budget = None if budget is None else time.monotonic() + budget
    while pending:
        again: list[tuple[str, list[Call]]] = []
        for label, calls in pending:
            now = time.monotonic()
            if t_budget is not None and now > t_budget and not (cancel and _any_invalid(results)):
                return results  # the rest (this part, the later ones, ``again``) go to the pool
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
            r = check_calls(calls, m, d, counterexample_deadline=deadline)
            if r.valid == VALID_UNKNOWN and r.cause == "timeout" and d != deadline:
                again.append((label, calls))
                continue
            r.reached = []
            results[label] = r
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


def _summary(results: dict[str, KeyResult], m: Model, invokes: int, seconds: float) -> dict[str, Any]:
    failures = [k for k, r in results.items() if r.valid is False]
    not_checked = [k for k, r in results.items() if r.cause == "cancelled"]
    # anything not decided True or False is undecided, whatever object the verdict arrived as
    unknown = [
        k
        for k, r in results.items()
        if r.valid is not True and r.valid is not False and r.cause != "cancelled"
    ]
    valid: bool | str = False if failures else (VALID_UNKNOWN if unknown or not_checked else True)
    out: dict[str, Any] = {
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
