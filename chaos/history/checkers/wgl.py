"""The linearizability search: Wing & Gong with Lowe's improvements, as porcupine does it.

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

The checker that splits a history into these searches is :mod:`chaos.history.checkers.linear`.
"""

from __future__ import annotations

import bisect
import gc
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from chaos.history.checkers.models import UNKNOWN, BaseModel, Call, Model

# The undecided verdict. Verdicts cross process boundaries (pickled results from the pool), so
# they are always compared by value (``==``), never by identity.
VALID_UNKNOWN = "unknown"
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
# Memoised transitions kept, in (state, op) entries, per search.
ROW_BUDGET = 4_000_000


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
    counterexample: dict[str, object] | None = None
    # internal: longest prefix (op ids), states after each (interned objects), failing op id
    prefix: list[int] = field(default_factory=list)
    states: list[object] = field(default_factory=list)
    failing: int | None = None
    reached: list[object] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        d: dict[str, object] = {"valid": self.valid, "ops": self.ops, "configs": self.configs}
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
    init: object,
    deadline: float | None = None,
    stop: object = None,
    track: bool = True,
    max_pushes: int | None = None,
) -> KeyResult:
    """WGL search over ``calls`` (ids must be 0..n-1) from state ``init``: the tables, then the walk.
    ``max_pushes``: give up (unknown, cause ``budget``) past about this many configurations."""
    n = len(calls)
    if n == 0:
        return KeyResult(True)
    ops = _OpTables(calls, model)
    if ops.left == 0:
        return KeyResult(True, n)
    space = _Space(calls, model, init)
    live_reads = _read_pruner(calls, model, ops, space)
    return _walk(ops, space, live_reads, _Limits(deadline, stop, max_pushes), track)


def _entry_list(calls: Sequence[Call]) -> tuple[list[int], list[int]]:
    """The doubly linked list of call and return entries in time order, as ``(nxt, prv)``.

    Entry ``i`` is op i's call, ``n + i`` its return (+infinity for a crashed op), ``2n`` the head
    and ``2n + 1`` the tail; ties put calls before returns (porcupine's ``makeEntries``)."""
    n = len(calls)
    inf = float("inf")
    # the calls first, then the returns: two long runs for the sort (the calls come in call order)
    events: list[tuple[float, int, int]] = [(c.call, 0, c.id) for c in calls]
    events += [(inf if c.ret is None else c.ret, 1, c.id) for c in calls]
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
        last_same: dict[Hashable, int] = {}
        crashed = self.crashed
        # the crashed ops alone, in call order (sorting every op for them cost a fifth of the tables)
        for c in sorted((c for c in calls if crashed[c.id]), key=lambda c: (c.call, c.id)):
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

    def __init__(self, calls: Sequence[Call], model: Model, init: object) -> None:
        n = len(calls)
        self.calls = calls
        self.step = model.step
        self.states: list[object] = []
        self.intern: dict[Hashable, int] = {}
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

    def add(self, state: object) -> int:
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
    """When a search gives up: past the deadline (``time.monotonic()``), when ``stop.is_set()``,
    past MAX_CONFIGS pushes, or past ``max_pushes`` (a caller's budget, e.g. a counterexample's
    window search). Checked every 1024 pushes."""

    __slots__ = ("deadline", "stop", "max_pushes")

    def __init__(self, deadline: float | None, stop: Any, max_pushes: int | None = None) -> None:
        self.deadline = deadline
        self.stop = stop
        self.max_pushes = max_pushes

    def cause(self, pushes: int) -> str | None:
        """None to go on, else the unknown verdict's cause: cancelled, memory, budget or timeout."""
        if self.stop is not None and self.stop.is_set():
            return "cancelled"
        if pushes > MAX_CONFIGS:
            return "memory"
        if self.max_pushes is not None and pushes >= self.max_pushes:
            return "budget"
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
    puts: list[tuple[int, object]] = []
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

    def __init__(self, extends: Callable[[object, object], bool], states: list[object], base: int) -> None:
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


def _hashable(v: object) -> object:
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    return v
