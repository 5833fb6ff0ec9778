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

import inspect
import math
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

from chaos.history.op import Op

if TYPE_CHECKING:
    from chaos.control.test import Test

NEMESIS_THREAD: Final = "nemesis"
NS: Final = 1_000_000_000

Thread = int | str
Process = int | str  # a client process id, or "nemesis"
OpDict = dict[str, Any]  # an op's fields; values are JSON-like


class _Pending:
    __slots__ = ()

    def __repr__(self) -> str:
        return "PENDING"


PENDING: Final = _Pending()


class Context:
    """What a generator may look at: time, free threads, thread -> process, rng.

    ``time`` is ns since the test start. ``free`` is the set of idle threads, ``threads`` every thread
    visible to this (possibly restricted) context, ``workers`` maps thread -> current process,
    ``concurrency`` is the number of client threads. Treat a context as immutable.
    """

    __slots__ = ("time", "free", "threads", "workers", "rng", "concurrency")

    def __init__(
        self,
        time: int,
        free: frozenset[Thread],
        threads: frozenset[Thread],
        workers: dict[Thread, Process],
        rng: random.Random,
        concurrency: int,
    ) -> None:
        self.time = time
        self.free = free
        self.threads = threads
        self.workers = workers
        self.rng = rng
        self.concurrency = concurrency

    @classmethod
    def initial(cls, concurrency: int, rng: random.Random | None = None, nemesis: bool = True) -> Context:
        """A context at time 0 with every thread free and process ``i`` on thread ``i``."""
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        threads: list[Thread] = list(range(concurrency))
        if nemesis:
            threads.append(NEMESIS_THREAD)
        workers: dict[Thread, Process] = {t: t for t in threads}
        fs = frozenset(threads)
        return cls(0, fs, fs, workers, rng or random.Random(0), concurrency)

    def thread_of(self, process: Process) -> Thread:
        """The thread a process runs on (``"nemesis"`` for the nemesis)."""
        if process == NEMESIS_THREAD:
            return NEMESIS_THREAD
        return int(process) % self.concurrency

    def restrict(self, threads: frozenset[Thread]) -> Context:
        """This context seen by a generator that only owns ``threads``."""
        if threads is self.threads or threads == self.threads:
            return self
        t = self.threads & threads
        return Context(self.time, self.free & t, t, self.workers, self.rng, self.concurrency)

    def some_free_thread(self) -> Thread | None:
        """A free thread picked with ``rng`` (so load spreads over clients and nodes), or None."""
        free = self.free
        if not free:
            return None
        if len(free) == 1:
            return next(iter(free))
        # set order is not reproducible (a str's hash varies between runs): sort for determinism
        s = sorted(free, key=_thread_sort_key) if NEMESIS_THREAD in free else sorted(free)
        return s[int(self.rng.random() * len(s))]

    def all_free(self) -> bool:
        return self.free == self.threads


def _thread_sort_key(t: Thread) -> tuple[int, int]:
    return (1, 0) if isinstance(t, str) else (0, t)


# what Generator.op answers: (an op, PENDING or None for exhausted; the next generator)
OpAnswer = OpDict | _Pending | None
OpResult = tuple[OpAnswer, "Generator | None"]


class Generator:
    """Base class; see the module docstring for the protocol.

    ``passive`` is True when :meth:`update` returns the generator itself for every event, so the
    interpreter may skip calling it (and building its context). Subclasses that override ``update``
    leave it False (the default); the built-in combinators derive it from their children.
    """

    __slots__ = ()
    passive: bool = False

    def op(self, test: Test | None, ctx: Context) -> OpResult:
        raise NotImplementedError

    def update(self, test: Test | None, ctx: Context, event: Op) -> Generator:
        return self


# what to_gen accepts: a generator, an op, a sequence of them, a function returning one, or None
GenLike = Generator | OpDict | Sequence["GenLike"] | Callable[..., "GenLike"] | None


def to_gen(x: object) -> Generator | None:
    """Turn a plain value into a generator (see the module docstring). Raises TypeError otherwise."""
    if x is None or isinstance(x, Generator):
        return x
    if isinstance(x, dict):
        if "f" not in x and x.get("type") not in ("sleep", "log"):
            raise TypeError(f"an op dict needs an 'f' field, got {x!r}")
        return OpGen(x)
    if isinstance(x, (list, tuple)):
        gens = tuple(g for g in (to_gen(e) for e in x) if g is not None)
        if not gens:
            return None
        return gens[0] if len(gens) == 1 else Seq(gens, 0)
    if callable(x):
        return FnGen(x)
    raise TypeError(f"not a generator: {x!r} (expected a Generator, an op dict, a list or a function)")


def fill_in_op(m: OpDict, ctx: Context) -> OpDict | _Pending:
    """``m`` with ``type``, ``process`` and ``time`` filled in from a free thread of ``ctx``."""
    p = m.get("process")
    if p is not None:
        if ctx.thread_of(p) not in ctx.free:
            return PENDING
        thread: Thread | None = ctx.thread_of(p)
    else:
        thread = ctx.some_free_thread()
        if thread is None:
            return PENDING
        p = ctx.workers[thread]
    op = dict(m)
    op["process"] = p
    if "type" not in op:
        op["type"] = "invoke"
    t = op.get("time")
    op["time"] = ctx.time if t is None or t < ctx.time else t
    return op


class OpGen(Generator):
    """A single op (a dict): emitted once to some free thread."""

    __slots__ = ("m",)
    passive = True

    def __init__(self, m: OpDict) -> None:
        self.m = m

    def op(self, test: Test | None, ctx: Context) -> OpResult:
        op = fill_in_op(self.m, ctx)
        if op is PENDING:
            return PENDING, self
        return op, None

    def __repr__(self) -> str:
        return f"OpGen({self.m!r})"


class FnGen(Generator):
    """Calls ``f(test, ctx)`` (or ``f()``) for each op; the result is an op dict or a generator."""

    __slots__ = ("f", "arity")
    passive = True

    def __init__(self, f: Callable[..., object], arity: int | None = None) -> None:
        self.f = f
        if arity is None:
            try:
                params = inspect.signature(f).parameters.values()
                arity = sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
            except (TypeError, ValueError):
                arity = 0
        if arity not in (0, 2):
            raise TypeError(f"a generator function takes () or (test, ctx), got {arity} parameters: {f!r}")
        self.arity = arity

    def op(self, test: Test | None, ctx: Context) -> OpResult:
        x = self.f(test, ctx) if self.arity == 2 else self.f()
        g = to_gen(x)
        if g is None:
            return None, None
        op, g2 = g.op(test, ctx)
        if op is None:
            return None, None
        return op, (self if g2 is None else Seq((g2, self), 0))


class Seq(Generator):
    """Runs ``gens[i:]`` one after another; updates go to the current one only."""

    __slots__ = ("gens", "i", "passive")

    def __init__(self, gens: tuple[Generator, ...], i: int) -> None:
        self.gens = gens
        self.i = i
        self.passive = gens[i].passive if i < len(gens) else True

    def op(self, test: Test | None, ctx: Context) -> OpResult:
        gens, i = self.gens, self.i
        n = len(gens)
        while i < n:
            op, g2 = gens[i].op(test, ctx)
            if op is None:
                i += 1
                continue
            if g2 is gens[i]:
                nxt: Generator = self if i == self.i else Seq(gens, i)
            elif g2 is None:
                nxt = Seq(gens, i + 1) if i + 1 < n else _EMPTY
                if op is PENDING:
                    return PENDING, (Seq(gens, i + 1) if i + 1 < n else None)
            else:
                nxt = Seq(gens[:i] + (g2,) + gens[i + 1 :], i)
            return op, nxt
        return None, None

    def update(self, test: Test | None, ctx: Context, event: Op) -> Generator:
        if self.i >= len(self.gens):
            return self
        g = self.gens[self.i]
        g2 = g.update(test, ctx, event)
        if g2 is g:
            return self
        gens = self.gens
        return Seq(gens[: self.i] + (g2,) + gens[self.i + 1 :], self.i)


class _Empty(Generator):
    __slots__ = ()
    passive = True

    def op(self, test: Test | None, ctx: Context) -> OpResult:
        return None, None


_EMPTY: Final = _Empty()


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


class IndependentConcurrent(Generator):
    """Jepsen's ``independent/concurrent-generator``: client threads in groups of ``n``; each group
    runs ``fgen(key)`` for one key at a time, taking the next key from ``keys`` when it is exhausted.
    Ops get ``"key": key``. Exhausted when ``keys`` runs out and every group is done.

    The group whose op is due first goes next; groups due at the same time take turns (round
    robin from the group after the last one served). A fixed order starved every group but the
    first under a rate limit, where all are due at once: 5 of 10 clients issued 1-2 ops in 60 s.
    """

    __slots__ = ("n", "fgen", "keys", "groups", "turn")

    def __init__(
        self,
        n: int,
        fgen: Callable[[Any], GenLike],
        keys: _KeySeq,
        groups: tuple[tuple[Any, Generator | None], ...] | None = None,
        turn: int = 0,
    ) -> None:
        if n < 1:
            raise ValueError(f"threads per key must be >= 1, got {n}")
        self.n = n
        self.fgen = fgen
        self.keys = keys
        self.groups = groups  # per group: (key, generator); None until the first op
        self.turn = turn  # the group that wins a tie next

    def _group_threads(self, ctx: Context, g: int) -> frozenset[Thread]:
        return frozenset(t for t in range(g * self.n, (g + 1) * self.n) if t in ctx.threads)

    def op(self, test: Test | None, ctx: Context) -> OpResult:
        keys = self.keys
        groups = self.groups
        if groups is None:
            ngroups = max(1, ctx.concurrency // self.n)
            gl: list[tuple[Any, Generator | None]] = []
            for _ in range(ngroups):
                k, keys = keys.next()
                gl.append((k, to_gen(self.fgen(k)) if k is not None else None))
            groups = tuple(gl)
        glist = list(groups)
        best: OpDict | None = None
        best_gi = -1
        best_next: Generator | None = None
        pending = False
        ng = len(glist)
        for gi in [(self.turn + j) % ng for j in range(ng)]:
            k, gen = glist[gi]
            while k is not None:
                if gen is None:  # this key is done: move the group to the next key
                    k, keys = keys.next()
                    gen = to_gen(self.fgen(k)) if k is not None else None
                    glist[gi] = (k, gen)
                    continue
                op, g2 = gen.op(test, ctx.restrict(self._group_threads(ctx, gi)))
                if op is None:
                    gen = None
                    continue
                if op is PENDING:
                    pending = True
                    glist[gi] = (k, g2)
                    break
                assert isinstance(op, dict)
                if best is None or op["time"] < best["time"]:
                    best, best_gi, best_next = op, gi, g2
                break
        if best is None:
            if pending:
                return PENDING, IndependentConcurrent(self.n, self.fgen, keys, tuple(glist), self.turn)
            return None, None
        best["key"] = glist[best_gi][0]
        glist[best_gi] = (glist[best_gi][0], best_next)
        return best, IndependentConcurrent(self.n, self.fgen, keys, tuple(glist), (best_gi + 1) % ng)

    def update(self, test: Test | None, ctx: Context, event: Op) -> Generator:
        if self.groups is None or event.process == NEMESIS_THREAD:
            return self
        gi = int(ctx.thread_of(event.process)) // self.n
        if gi >= len(self.groups):
            return self
        k, gen = self.groups[gi]
        if gen is None or event.key != k:
            return self
        g2 = gen.update(test, ctx.restrict(self._group_threads(ctx, gi)), event)
        if g2 is gen:
            return self
        gl = list(self.groups)
        gl[gi] = (k, g2)
        return IndependentConcurrent(self.n, self.fgen, self.keys, tuple(gl), self.turn)


class _KeySeq:
    """An immutable view of an iterator of keys (shared buffer), so generators stay pure."""

    __slots__ = ("buf", "it", "i")

    def __init__(self, it: Iterator[Any], buf: list[Any] | None = None, i: int = 0) -> None:
        self.it = it
        self.buf = [] if buf is None else buf
        self.i = i

    def next(self) -> tuple[Any, _KeySeq]:
        if self.i >= len(self.buf):
            try:
                self.buf.append(next(self.it))
            except StopIteration:
                return None, self
        return self.buf[self.i], _KeySeq(self.it, self.buf, self.i + 1)


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
    threads_per_key: int, keys: Iterable[Any], fgen: Callable[[Any], GenLike]
) -> Generator:
    """Groups of ``threads_per_key`` client threads, each working through keys with ``fgen(key)``."""
    return IndependentConcurrent(threads_per_key, fgen, _KeySeq(iter(keys)))


# ---------------------------------------------------------------------------------------------------
# Simulation (jepsen.generator.test): run a generator in simulated time, no real clients.


def simulate(
    gen: GenLike,
    *,
    concurrency: int = 2,
    seed: int = 0,
    latency: float = 0.0,
    complete: Callable[[OpDict], tuple[str, Any]] | None = None,
    max_ops: int = 100_000,
    nemesis: bool = True,
) -> list[Op]:
    """Runs ``gen`` with instant virtual clients; returns the history (invocations and completions).

    Each op completes ``latency`` seconds after its invocation; ``complete(op) -> (type, value)``
    picks the completion (default ``("ok", op value)``; nemesis ops are ``info``). Sleep ops hold
    their thread for their duration. Deterministic for a given ``seed``. Stops after ``max_ops``
    invocations (raises RuntimeError if the generator stays pending forever with nothing in flight).
    """
    sim = _Simulation(gen, concurrency, seed, latency, complete, nemesis)
    while sim.gen is not None and sim.invoked < max_ops:
        op, g2 = sim.gen.op(None, sim.context())
        if op is PENDING:
            if g2 is not None:
                sim.gen = g2
            if not sim.inflight:
                raise RuntimeError("generator is pending with nothing in flight: it would wait forever")
        elif op is not None:
            assert isinstance(op, dict)
            if not sim.inflight or op["time"] <= min(sim.inflight)[0]:
                sim.gen = g2
                sim.start(op)
                continue
        if not sim.inflight:
            break
        sim.complete_next()  # nothing to invoke before the earliest op in flight completes
    return sim.history


class _Simulation:
    """The state of :func:`simulate`: virtual time (ns), free threads, ops in flight as (time they
    end, sequence number, thread, op or None for a sleep) kept sorted, and the history so far."""

    def __init__(
        self,
        gen: GenLike,
        concurrency: int,
        seed: int,
        latency: float,
        complete: Callable[[OpDict], tuple[str, Any]] | None,
        nemesis: bool,
    ) -> None:
        self.rng = random.Random(seed)
        self.base = Context.initial(concurrency, self.rng, nemesis=nemesis)
        self.gen = to_gen(gen)
        self.concurrency = concurrency
        self.latency = int(latency * NS)
        self.complete = complete
        self.now = 0
        self.free = set(self.base.free)
        self.workers = dict(self.base.workers)
        self.inflight: list[tuple[int, int, Thread, OpDict | None]] = []
        self.seq = 0
        self.history: list[Op] = []
        self.invoked = 0

    def context(self) -> Context:
        return Context(
            self.now, frozenset(self.free), self.base.threads, self.workers, self.rng, self.concurrency
        )

    def start(self, op: OpDict) -> None:
        """Takes up ``op``'s thread at its time: a sleep holds it for its duration, a log frees it
        at once, an invocation is recorded (and shown to the generator) and completes after the
        latency."""
        self.now = max(self.now, op["time"])
        thread = self.base.thread_of(op["process"])
        self.free.discard(thread)
        if op["type"] == "sleep":
            self.inflight.append((self.now + int(op["value"] * NS), self.seq, thread, None))
        elif op["type"] == "log":
            self.free.add(thread)
        else:
            inv = self._record("invoke", op, op.get("value"))
            self.invoked += 1
            if self.gen is not None:
                self.gen = self.gen.update(None, self.context(), inv)
            self.inflight.append((self.now + self.latency, self.seq, thread, op))
        self.seq += 1
        self.inflight.sort(key=lambda x: (x[0], x[1]))

    def complete_next(self) -> None:
        """Completes the earliest op in flight (``info`` for the nemesis, else by ``complete``); a
        client whose op ends ``info`` continues as a new process."""
        t, _, thread, iop = self.inflight.pop(0)
        self.now = max(self.now, t)
        self.free.add(thread)
        if iop is None:
            return
        if iop["process"] == NEMESIS_THREAD:
            typ, val = "info", iop.get("value")
        elif self.complete is not None:
            typ, val = self.complete(iop)
        else:
            typ, val = "ok", iop.get("value")
        comp = self._record(typ, iop, val)
        if typ == "info" and iop["process"] != NEMESIS_THREAD:
            self.workers[thread] = iop["process"] + self.concurrency
        if self.gen is not None:
            self.gen = self.gen.update(None, self.context(), comp)

    def _record(self, typ: str, op: OpDict, value: Any) -> Op:
        rec = Op(
            type=typ,
            process=op["process"],
            f=op["f"],
            value=value,
            time=self.now,
            key=op.get("key"),
            index=len(self.history),
        )
        self.history.append(rec)
        return rec
