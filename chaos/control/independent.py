"""Jepsen's ``jepsen.independent/concurrent-generator``: client threads in groups, each group
running one key's generator at a time (:func:`chaos.control.generator.independent_concurrent`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from chaos.control.genbase import (
    NEMESIS_THREAD,
    PENDING,
    Context,
    Generator,
    GenLike,
    OpDict,
    OpResult,
    Thread,
    to_gen,
)
from chaos.history.op import Op

if TYPE_CHECKING:
    from chaos.control.test import Test


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
        groups: tuple[tuple[object, Generator | None], ...] | None = None,
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
            gl: list[tuple[object, Generator | None]] = []
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

    def __init__(self, it: Iterator[Any], buf: list[object] | None = None, i: int = 0) -> None:
        self.it = it
        self.buf = [] if buf is None else buf
        self.i = i

    def next(self) -> tuple[object, _KeySeq]:
        if self.i >= len(self.buf):
            try:
                self.buf.append(next(self.it))
            except StopIteration:
                return None, self
        return self.buf[self.i], _KeySeq(self.it, self.buf, self.i + 1)
