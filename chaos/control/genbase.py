"""The generator core (Jepsen's jepsen.generator): the :class:`Context` a generator sees, the
:class:`Generator` protocol, plain values as generators (:func:`to_gen`: an op, a sequence, a
function) and ops filled in from a free thread (:func:`fill_in_op`). The combinators and their
Jepsen-named constructors are :mod:`chaos.control.generator`, which re-exports these names; the
protocol is described there."""

from __future__ import annotations

import inspect
import random
from collections.abc import Callable, Sequence
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
