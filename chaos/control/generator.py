"""Generators: a pure, composable description of which op to invoke next (Jepsen's jepsen.generator).

A generator is an immutable value with two methods:

``op(test, ctx) -> (op | PENDING | None, next_generator | None)``
    ``op`` is a dict with at least ``f`` (and usually ``value``; optionally ``key``), filled in with
    ``type`` ("invoke", or "sleep" / "log" for the interpreter's own ops), ``process`` (a free process
    of ``ctx``) and ``time`` (ns since test start, possibly in the future: the interpreter waits until
    then). ``PENDING`` means "nothing now, ask again after a completion or a moment later"; ``None``
    means the generator is exhausted. With ``PENDING`` the returned generator (if not None) replaces
    the current one. The interpreter may *discard* a returned op (for example when
    a completion arrives before the op's time) and ask the previous generator again, so ``op`` must
    not have side effects beyond drawing from ``ctx.rng``.

``update(test, ctx, event) -> generator``
    Called with every invocation and completion (``chaos.history.op.Op``) the interpreter records,
    unless the generator is ``passive`` (a class or instance attribute, False by default): then its
    update is known to return itself and the interpreter skips the call (and building its context).

Plain values are generators too (:func:`to_gen`): ``None`` is exhausted; a ``dict`` is one op; a
``list``/``tuple`` runs its elements one after another; a function ``f(test, ctx)`` or ``f()`` is
called each time an op is needed and its result (an op dict or a generator) is used, ending when it
returns ``None``. Durations passed to combinators are in seconds (floats); all times inside are
integer nanoseconds.

The context (:class:`Context`) holds the current time, the free threads, the thread -> process
map and the seeded ``rng``. Threads are ints ``0..concurrency-1`` for clients and ``"nemesis"``.
Client process ``p`` runs on thread ``p % concurrency`` (a retired process ``p`` continues as
``p + concurrency`` on the same thread).

Combinators (Jepsen names): :func:`once`, :func:`limit`, :func:`repeat`, :func:`cycle`, :func:`mix`,
:func:`any_gen`, :func:`phases`, :func:`then`, :func:`synchronize`, :func:`time_limit`,
:func:`stagger`, :func:`delay`, :func:`sleep`, :func:`log`, :func:`each_thread`, :func:`on_threads`,
:func:`clients`, :func:`nemesis`, :func:`flip_flop`, :func:`gmap`, :func:`f_map`, :func:`gfilter`,
:func:`until_ok`, :func:`independent_concurrent` (jepsen.independent/concurrent-generator).
:func:`simulate` runs a generator in simulated time (like jepsen.generator.test), for tests.

Example (a register workload under a nemesis schedule, 60 s)::

    g = time_limit(60, clients(stagger(0.01, mix([reads, writes])),
                               nemesis(cycle([sleep(10), {"f": "start-partition"},
                                              sleep(10), {"f": "stop-partition"}]))))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Final

from chaos.control.genbase import (
    _EMPTY,
    NEMESIS_THREAD,
    NS,
    PENDING,
    Context,
    FnGen,
    Generator,
    GenLike,
    OpAnswer,
    OpDict,
    OpGen,
    OpResult,
    Process,
    Seq,
    Thread,
    fill_in_op,
    to_gen,
)
from chaos.control.gensim import simulate
from chaos.control.independent import IndependentConcurrent, _KeySeq
from chaos.history.op import Op

if TYPE_CHECKING:
    from chaos.control.test import Test


class Limit(Generator):
    """At most ``n`` ops from ``gen`` (Jepsen's ``limit``)."""

    __slots__ = ("n", "gen", "passive")

    def __init__(self, n: int, gen: Generator) -> None:
        self.n = n
        self.gen = gen
        self.passive = gen.passive

    def op(self, test: Test | None, ctx: Context) -> OpResult:
        if self.n <= 0:
            return None, None
        op, g2 = self.gen.op(test, ctx)
        if op is None:
            return None, None
        if op is PENDING:
            return PENDING, (Limit(self.n, g2) if g2 is not None else None)
        if g2 is None or self.n == 1:
            return op, None
        return op, Limit(self.n - 1, g2)

    def update(self, test: Test | None, ctx: Context, event: Op) -> Generator:
        g2 = self.gen.update(test, ctx, event)
        return self if g2 is self.gen else Limit(self.n, g2)


class Repeat(Generator):
    """Emits ``gen``'s first op again and again without advancing it, forever or ``n`` times."""

    __slots__ = ("n", "gen", "passive")

    def __init__(self, n: int | None, gen: Generator) -> None:
        self.n = n
        self.gen = gen
        self.passive = gen.passive

    def op(self, test: Test | None, ctx: Context) -> OpResult:
        if self.n is not None and self.n <= 0:
            return None, None
        op, _ = self.gen.op(test, ctx)
        if op is None:
            return None, None
        if op is PENDING:
            return PENDING, self
        return op, (self if self.n is None else Repeat(self.n - 1, self.gen))

    def update(self, test: Test | None, ctx: Context, event: Op) -> Generator:
        g2 = self.gen.update(test, ctx, event)
        return self if g2 is self.gen else Repeat(self.n, g2)


class Cycle(Generator):
    """Runs ``gen`` to exhaustion, then starts it over, forever or ``n`` times in all."""

    __slots__ = ("n", "orig", "gen", "passive")

    def __init__(self, n: int | None, orig: Generator, gen: Generator | None = None) -> None:
        self.n = n
        self.orig = orig
        self.gen = orig if gen is None else gen
        self.passive = self.gen.passive

    def op(self, test: Test | None, ctx: Context) -> OpResult:
        n, gen = self.n, self.gen
        for _ in range(2):
            if n is not None and n <= 0:
                return None, None
            op, g2 = gen.op(test, ctx)
            if op is not None:
                if g2 is None:
                    # exhausted after this op: the next call starts the next cycle
                    nn = None if n is None else n - 1
                    if op is PENDING:
                        return PENDING, Cycle(nn, self.orig)
                    return op, Cycle(nn, self.orig)
                return op, (self if g2 is self.gen and n == self.n else Cycle(n, self.orig, g2))
            n = None if n is None else n - 1
            gen = self.orig
        return None, None  # the original yields nothing: stop rather than spin

    def update(self, test: Test | None, ctx: Context, event: Op) -> Generator:
        g2 = self.gen.update(test, ctx, event)
        return self if g2 is self.gen else Cycle(self.n, self.orig, g2)


class Mix(Generator):
    """Each op comes from a randomly chosen (``ctx.rng``) one of ``gens``; exhausted ones drop out."""

    __slots__ = ("gens",)
    passive = True  # like Jepsen's mix, updates are not passed on

    def __init__(self, gens: tuple[Generator, ...]) -> None:
        self.gens = gens

    def op(self, test: Test | None, ctx: Context) -> OpResult:
        gens = self.gens
        while gens:
            n = len(gens)
            i = int(ctx.rng.random() * n) if n > 1 else 0
            op, g2 = gens[i].op(test, ctx)
            if op is None:
                gens = gens[:i] + gens[i + 1 :]
                continue
            if g2 is gens[i]:
                return op, (self if gens is self.gens else Mix(gens))
            if g2 is None:
                rest = gens[:i] + gens[i + 1 :]
                return op, (Mix(rest) if rest else None)
            return op, Mix(gens[:i] + (g2,) + gens[i + 1 :])
        return None, None


class AnyGen(Generator):
    """Takes the soonest op of any of ``gens`` (Jepsen's ``any``); updates go to all."""

    __slots__ = ("gens", "passive")

    def __init__(self, gens: tuple[Generator, ...]) -> None:
        self.gens = gens
        self.passive = all(g.passive for g in gens)

    def op(self, test: Test | None, ctx: Context) -> OpResult:
        best: OpDict | None = None
        best_i = -1
        best_g: Generator | None = None
        pending = False
        alive: list[int] = []
        for i, g in enumerate(self.gens):
            op, g2 = g.op(test, ctx)
            if op is None:
                continue
            alive.append(i)
            if op is PENDING:
                pending = True
                continue
            assert isinstance(op, dict)
            if best is None or op["time"] < best["time"]:
                best, best_i, best_g = op, i, g2
        if best is None:
            if not pending:
                return None, None
            if len(alive) == len(self.gens):
                return PENDING, self
            return PENDING, AnyGen(tuple(self.gens[i] for i in alive))
        # keep the live ones; the chosen one advances, the others are unchanged (their ops were not taken)
        keep = []
        for j, g in enumerate(self.gens):
            if j == best_i:
                if best_g is not None:
                    keep.append(best_g)
            elif j in alive:
                keep.append(g)
        return best, (AnyGen(tuple(keep)) if keep else None)

    def update(self, test: Test | None, ctx: Context, event: Op) -> Generator:
        gens = tuple(g.update(test, ctx, event) for g in self.gens)
        if all(a is b for a, b in zip(gens, self.gens, strict=True)):
            return self
        return AnyGen(gens)


class OnThreads(Generator):
    """Runs ``gen`` on the threads in ``threads`` only; passes it only their events."""

    __slots__ = ("threads", "gen", "passive")

    def __init__(self, threads: Callable[[Context], frozenset[Thread]] | frozenset[Thread], gen: Generator):
        self.threads = threads
        self.gen = gen
        self.passive = gen.passive

    def _threads(self, ctx: Context) -> frozenset[Thread]:
        t = self.threads
        return t if isinstance(t, frozenset) else t(ctx)

    def op(self, test: Test | None, ctx: Context) -> OpResult:
        t = self.threads
        op, g2 = self.gen.op(test, ctx.restrict(t if type(t) is frozenset else t(ctx)))  # type: ignore[operator]
        if g2 is None:
            return op, None
        return op, (self if g2 is self.gen else OnThreads(t, g2))

    def update(self, test: Test | None, ctx: Context, event: Op) -> Generator:
        ts = self._threads(ctx)
        if ctx.thread_of(event.process) not in ts:
            return self
        g2 = self.gen.update(test, ctx.restrict(ts), event)
        return self if g2 is self.gen else OnThreads(self.threads, g2)


_CLIENT_CACHE: dict[frozenset[Thread], frozenset[Thread]] = {}


def _client_threads(ctx: Context) -> frozenset[Thread]:
    ts = ctx.threads
    r = _CLIENT_CACHE.get(ts)
    if r is None:
        if len(_CLIENT_CACHE) > 256:
            _CLIENT_CACHE.clear()
        r = frozenset(t for t in ts if t != NEMESIS_THREAD)
        _CLIENT_CACHE[ts] = r = ts if r == ts else r  # the same object: restrict() sees it by identity
    return r


_NEMESIS_ONLY: Final = frozenset([NEMESIS_THREAD])


class EachThread(Generator):
    """Every thread runs its own copy of ``gen`` (Jepsen's ``each-thread``)."""

    __slots__ = ("orig", "per", "passive")

    def __init__(self, orig: Generator, per: dict[Thread, Generator | None] | None = None) -> None:
        self.orig = orig
        self.per = per or {}
        self.passive = orig.passive and all(g is None or g.passive for g in self.per.values())

    def op(self, test: Test | None, ctx: Context) -> OpResult:
        best: OpDict | None = None
        best_t: Thread | None = None
        best_g: Generator | None = None
        pending = False
        for t in ctx.threads:
            g = self.per.get(t, self.orig)
            if g is None:
                continue
            if t not in ctx.free:
                pending = True
                continue
            op, g2 = g.op(test, ctx.restrict(frozenset([t])))
            if op is None:
                continue
            if op is PENDING:
                pending = True
                continue
            assert isinstance(op, dict)
            if best is None or op["time"] < best["time"]:
                best, best_t, best_g = op, t, g2
        if best is None:
            if pending:
                return PENDING, self
            # every thread of ctx is done; threads outside ctx never run here
            return None, None
        per = dict(self.per)
        assert best_t is not None
        per[best_t] = best_g
        return best, EachThread(self.orig, per)

    def update(self, test: Test | None, ctx: Context, event: Op) -> Generator:
        t = ctx.thread_of(event.process)
        if t not in ctx.threads:
            return self
        g = self.per.get(t, self.orig)
        if g is None:
            return self
        g2 = g.update(test, ctx.restrict(frozenset([t])), event)
        if g2 is g:
            return self
        per = dict(self.per)
        per[t] = g2
        return EachThread(self.orig, per)


class Synchronize(Generator):
    """Pending until every thread of the context is free, then behaves as ``gen``."""

    __slots__ = ("gen",)
    passive = True

    def __init__(self, gen: Generator) -> None:
        self.gen = gen

    def op(self, test: Test | None, ctx: Context) -> OpResult:
        if ctx.free == ctx.threads:
            return self.gen.op(test, ctx)
        return PENDING, self


class TimeLimit(Generator):
    """Ops from ``gen`` until ``dt`` ns after the first op was asked for; then exhausted."""

    __slots__ = ("dt", "cutoff", "gen", "passive")

    def __init__(self, dt: int, gen: Generator, cutoff: int | None = None) -> None:
        self.dt = dt
        self.gen = gen
        self.passive = gen.passive
        self.cutoff = cutoff

    def op(self, test: Test | None, ctx: Context) -> OpResult:
        cutoff = ctx.time + self.dt if self.cutoff is None else self.cutoff
        if ctx.time >= cutoff:
            return None, None
        op, g2 = self.gen.op(test, ctx)
        if op is None:
            return None, None
        if op is PENDING:
            return PENDING, (TimeLimit(self.dt, g2, cutoff) if g2 is not None else None)
        assert isinstance(op, dict)
        if op["time"] >= cutoff:
            return None, None
        return op, (TimeLimit(self.dt, g2, cutoff) if g2 is not None else None)

    def update(self, test: Test | None, ctx: Context, event: Op) -> Generator:
        g2 = self.gen.update(test, ctx, event)
        return self if g2 is self.gen else TimeLimit(self.dt, g2, self.cutoff)


class _Spaced(Generator):
    """Shared body of :class:`Stagger` and :class:`Delay`: holds each op of ``gen`` back to
    ``next_time`` (ns) and sets the next one ``_gap(ctx)`` ns after it; subclasses give the gap."""

    __slots__ = ("dt", "gen", "next_time", "passive")

    def __init__(self, dt: int, gen: Generator, next_time: int | None = None) -> None:
        self.dt = dt
        self.gen = gen
        self.passive = gen.passive
        self.next_time = next_time

    def _gap(self, ctx: Context) -> int:
        raise NotImplementedError

    def op(self, test: Test | None, ctx: Context) -> OpResult:
        op, g2 = self.gen.op(test, ctx)
        if op is None:
            return None, None
        cls = type(self)
        if op is PENDING:
            return PENDING, (self if g2 is self.gen else (cls(self.dt, g2, self.next_time) if g2 else None))
        assert isinstance(op, dict)
        nt = ctx.time if self.next_time is None else self.next_time
        if op["time"] < nt:
            op["time"] = nt
        nxt = op["time"] + self._gap(ctx)
        return op, (cls(self.dt, g2, nxt) if g2 is not None else None)

    def update(self, test: Test | None, ctx: Context, event: Op) -> Generator:
        g2 = self.gen.update(test, ctx, event)
        return self if g2 is self.gen else type(self)(self.dt, g2, self.next_time)


class Stagger(_Spaced):
    """Spaces ops of ``gen`` by uniform random gaps in [0, 2*dt] ns: a total rate of 1/dt."""

    __slots__ = ()

    def _gap(self, ctx: Context) -> int:
        return int(ctx.rng.random() * 2 * self.dt)


class Delay(_Spaced):
    """Spaces ops of ``gen`` exactly ``dt`` ns apart (Jepsen's ``delay``)."""

    __slots__ = ()

    def _gap(self, ctx: Context) -> int:
        return self.dt


class FlipFlop(Generator):
    """Alternates ops from ``a`` and ``b``, starting with ``a``; ends when the one due is exhausted."""

    __slots__ = ("a", "b")
    passive = True

    def __init__(self, a: Generator, b: Generator) -> None:
        self.a = a
        self.b = b

    def op(self, test: Test | None, ctx: Context) -> OpResult:
        op, a2 = self.a.op(test, ctx)
        if op is None:
            return None, None
        if op is PENDING:
            return PENDING, (FlipFlop(a2, self.b) if a2 is not None else None)
        if a2 is None:
            return op, _FlipLast(self.b)
        return op, FlipFlop(self.b, a2)


class _FlipLast(Generator):
    # after ``a`` is exhausted, one more op from ``b`` (so a start is followed by its stop), then done
    __slots__ = ("b",)
    passive = True

    def __init__(self, b: Generator) -> None:
        self.b = b

    def op(self, test: Test | None, ctx: Context) -> OpResult:
        op, b2 = self.b.op(test, ctx)
        if op is PENDING:
            return PENDING, (_FlipLast(b2) if b2 is not None else None)
        return op, None


class GMap(Generator):
    """Applies ``fn(op) -> op`` to every op of ``gen``."""

    __slots__ = ("fn", "gen", "passive")

    def __init__(self, fn: Callable[[OpDict], OpDict], gen: Generator) -> None:
        self.fn = fn
        self.gen = gen
        self.passive = gen.passive

    def op(self, test: Test | None, ctx: Context) -> OpResult:
        op, g2 = self.gen.op(test, ctx)
        if isinstance(op, dict):
            op = self.fn(op)
        return op, (GMap(self.fn, g2) if g2 is not None else None)

    def update(self, test: Test | None, ctx: Context, event: Op) -> Generator:
        g2 = self.gen.update(test, ctx, event)
        return self if g2 is self.gen else GMap(self.fn, g2)


class GFilter(Generator):
    """Only the ops of ``gen`` for which ``pred(op)`` is true."""

    __slots__ = ("pred", "gen", "passive")

    def __init__(self, pred: Callable[[OpDict], bool], gen: Generator) -> None:
        self.pred = pred
        self.gen = gen
        self.passive = gen.passive

    def op(self, test: Test | None, ctx: Context) -> OpResult:
        gen: Generator | None = self.gen
        while gen is not None:
            op, g2 = gen.op(test, ctx)
            if op is None:
                return None, None
            if op is PENDING or self.pred(op):  # type: ignore[arg-type]
                return op, (GFilter(self.pred, g2) if g2 is not None else None)
            gen = g2
        return None, None

    def update(self, test: Test | None, ctx: Context, event: Op) -> Generator:
        g2 = self.gen.update(test, ctx, event)
        return self if g2 is self.gen else GFilter(self.pred, g2)


class UntilOk(Generator):
    """Ops from ``gen`` until one of them completes ``ok`` (Jepsen's ``until-ok``)."""

    __slots__ = ("gen", "done", "active")

    def __init__(self, gen: Generator, done: bool = False, active: frozenset[Process] = frozenset()) -> None:
        self.gen = gen
        self.done = done
        self.active = active

    def op(self, test: Test | None, ctx: Context) -> OpResult:
        if self.done:
            return None, None
        op, g2 = self.gen.op(test, ctx)
        if op is None or g2 is None and op is PENDING:
            return op, None
        if op is PENDING:
            return PENDING, UntilOk(g2, False, self.active)  # type: ignore[arg-type]
        return op, (UntilOk(g2, False, self.active) if g2 is not None else None)

    def update(self, test: Test | None, ctx: Context, event: Op) -> Generator:
        g2 = self.gen.update(test, ctx, event)
        if event.type == "invoke":
            return UntilOk(g2, self.done, self.active | {event.process})
        if event.process in self.active:
            return UntilOk(g2, self.done or event.type == "ok", self.active - {event.process})
        return self if g2 is self.gen else UntilOk(g2, self.done, self.active)


# ---------------------------------------------------------------------------------------------------
# Constructors (Jepsen names). Arguments accept anything to_gen accepts; durations are seconds.


def _g(x: object) -> Generator:
    g = to_gen(x)
    return _EMPTY if g is None else g


def _ns(seconds: float, what: str) -> int:
    """``seconds`` as integer ns; ValueError naming ``what`` unless a finite number >= 0."""
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, (int, float))
        or not math.isfinite(seconds)
        or seconds < 0
    ):
        raise ValueError(f"{what} must be a finite, non-negative number of seconds, got {seconds!r}")
    return int(seconds * NS)


def once(gen: GenLike) -> Generator:
    """The first op of ``gen`` only."""
    return Limit(1, _g(gen))


def limit(n: int, gen: GenLike) -> Generator:
    """At most ``n`` ops of ``gen``."""
    if n < 0:
        raise ValueError(f"limit must be >= 0, got {n}")
    return Limit(n, _g(gen))


def repeat(gen: GenLike, n: int | None = None) -> Generator:
    """``gen``'s first op repeated forever, or ``n`` times (Jepsen's ``repeat``)."""
    return Repeat(n, _g(gen))


def cycle(gen: GenLike, n: int | None = None) -> Generator:
    """``gen`` run again from the start each time it is exhausted, forever or ``n`` times."""
    return Cycle(n, _g(gen))


def mix(gens: Iterable[GenLike]) -> Generator:
    """A random one of ``gens`` for each op."""
    gs = tuple(_g(g) for g in gens)
    if not gs:
        raise ValueError("mix needs at least one generator")
    return Mix(gs)


def any_gen(*gens: GenLike) -> Generator:
    """The soonest op of any of ``gens`` (Jepsen's ``any``)."""
    return AnyGen(tuple(_g(g) for g in gens))


def synchronize(gen: GenLike) -> Generator:
    """Waits until every thread is free, then runs ``gen``."""
    return Synchronize(_g(gen))


def phases(*gens: GenLike) -> Generator:
    """Each of ``gens`` in turn, each starting only once every thread is free."""
    return Seq(tuple(Synchronize(_g(g)) for g in gens), 0)


def then(a: GenLike, b: GenLike) -> Generator:
    """``a``, then (synchronized) ``b``."""
    return Seq((_g(a), Synchronize(_g(b))), 0)


def time_limit(seconds: float, gen: GenLike) -> Generator:
    """Ops of ``gen`` until ``seconds`` after it is first asked for an op."""
    return TimeLimit(_ns(seconds, "time limit"), _g(gen))


def stagger(seconds: float, gen: GenLike) -> Generator:
    """Ops of ``gen`` with random gaps in [0, 2*seconds]: on average 1/seconds ops/s in total."""
    return Stagger(_ns(seconds, "stagger interval"), _g(gen))


def delay(seconds: float, gen: GenLike) -> Generator:
    """Ops of ``gen`` exactly ``seconds`` apart."""
    return Delay(_ns(seconds, "delay"), _g(gen))


def sleep(seconds: float) -> Generator:
    """A thread sleeps ``seconds`` (not recorded in the history)."""
    _ns(seconds, "sleep")
    return OpGen({"type": "sleep", "f": "sleep", "value": float(seconds)})


def log(message: str) -> Generator:
    """Logs ``message`` when reached (not recorded in the history; takes no time)."""
    return OpGen({"type": "log", "f": "log", "value": str(message)})


def each_thread(gen: GenLike) -> Generator:
    """Every thread runs its own copy of ``gen``."""
    return EachThread(_g(gen))


def on_threads(threads: Iterable[Thread], gen: GenLike) -> Generator:
    """``gen`` restricted to ``threads``."""
    return OnThreads(frozenset(threads), _g(gen))


def clients(client_gen: GenLike, nemesis_gen: GenLike = None) -> Generator:
    """``client_gen`` on the client threads only (and ``nemesis_gen``, if given, on the nemesis)."""
    c = OnThreads(_client_threads, _g(client_gen))
    if nemesis_gen is None:
        return c
    return AnyGen((c, OnThreads(_NEMESIS_ONLY, _g(nemesis_gen))))


def nemesis(nemesis_gen: GenLike, client_gen: GenLike = None) -> Generator:
    """``nemesis_gen`` on the nemesis thread only (and ``client_gen``, if given, on the clients)."""
    n = OnThreads(_NEMESIS_ONLY, _g(nemesis_gen))
    if client_gen is None:
        return n
    return AnyGen((OnThreads(_client_threads, _g(client_gen)), n))


def flip_flop(a: GenLike, b: GenLike) -> Generator:
    """Alternates ops of ``a`` and ``b`` (e.g. start/stop of a fault)."""
    return FlipFlop(_g(a), _g(b))


def gmap(fn: Callable[[OpDict], OpDict], gen: GenLike) -> Generator:
    """Every op of ``gen`` transformed by ``fn``."""
    return GMap(fn, _g(gen))


def f_map(mapping: dict[str, str], gen: GenLike) -> Generator:
    """Renames the ``f`` of ops of ``gen`` through ``mapping``."""

    def fn(op: OpDict) -> OpDict:
        f = op.get("f")
        if f in mapping:
            op["f"] = mapping[f]
        return op

    return GMap(fn, _g(gen))


def gfilter(pred: Callable[[OpDict], bool], gen: GenLike) -> Generator:
    """Only the ops of ``gen`` for which ``pred`` holds."""
    return GFilter(pred, _g(gen))


def until_ok(gen: GenLike) -> Generator:
    """Ops of ``gen`` until one completes ok."""
    return UntilOk(_g(gen))


def independent_concurrent(
    threads_per_key: int, keys: Iterable[object], fgen: Callable[[Any], GenLike]
) -> Generator:
    """Groups of ``threads_per_key`` client threads, each working through keys with ``fgen(key)``."""
    return IndependentConcurrent(threads_per_key, fgen, _KeySeq(iter(keys)))


__all__ = [
    "NEMESIS_THREAD",
    "NS",
    "PENDING",
    "Context",
    "FnGen",
    "Generator",
    "GenLike",
    "IndependentConcurrent",
    "OpAnswer",
    "OpDict",
    "OpGen",
    "OpResult",
    "Process",
    "Seq",
    "Thread",
    "fill_in_op",
    "simulate",
    "to_gen",
]
