"""The long-fork workload (Jepsen's ``jepsen.tests.long-fork``): single inserts of fresh keys and
reads of key groups, through the DB's ``txn`` client (:class:`chaos.control.client.TxnClient`).

Keys are grouped ``GROUP_SIZE`` at a time (Jepsen's ``n``, 2: keys ``[k - k mod n, k - k mod n +
n)``). As Jepsen's generator: a worker that wrote a key reads that key's group next (to catch the
write before it propagates); otherwise, half the time, it reads the group of another worker's
pending write, else it writes the next fresh key. A write is ``[["append", k, 1]]`` (an insert:
each key is written once, so what a read saw is unambiguous; ``append`` rather than Jepsen's ``w``
so any DB serving list-append serves it), a read ``[["r", k, null], ...]`` over the group in
shuffled order. Checked by ``long-fork`` (two reads of a group that saw the group's writes in
opposite orders), ``stats``, ``perf``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from chaos.control import generator as gen
from chaos.control.test import Test
from chaos.history.checkers.longfork import LongForkChecker
from chaos.workloads import Workload
from chaos.workloads.txn import PROTOCOL, TxnWorker

GROUP_SIZE = LongForkChecker().group_size


def read_txn(n: int, k: int, rng: random.Random) -> list[list[Any]]:
    """Jepsen's ``read-txn-for``: reads of ``k``'s group in shuffled order."""
    lo = k - k % n
    keys = list(range(lo, lo + n))
    rng.shuffle(keys)
    return [["r", key, None] for key in keys]


class LongForkOps(gen.Generator):
    """Jepsen's long-fork generator as a pure generator: ``next_key`` and ``pending`` (thread ->
    the key it wrote last and has not read yet) travel in the value."""

    __slots__ = ("n", "next_key", "pending")

    def __init__(self, n: int = GROUP_SIZE, next_key: int = 0, pending: Mapping[Any, int] | None = None):
        self.n = n
        self.next_key = next_key
        self.pending = dict(pending or {})

    def op(self, test: Test | None, ctx: gen.Context) -> gen.OpResult:
        thread = ctx.some_free_thread()
        if thread is None:
            return gen.PENDING, self
        pending = dict(self.pending)
        next_key = self.next_key
        own = pending.pop(thread, None)
        if own is not None:
            txn = read_txn(self.n, own, ctx.rng)
        elif pending and ctx.rng.random() < 0.5:
            txn = read_txn(self.n, ctx.rng.choice(sorted(pending.values())), ctx.rng)
        else:
            txn = [["append", next_key, 1]]
            pending[thread] = next_key
            next_key += 1
        op = gen.fill_in_op({"f": "txn", "value": txn, "process": ctx.workers[thread]}, ctx)
        if op is gen.PENDING:
            return gen.PENDING, self
        return op, LongForkOps(self.n, next_key, pending)


def workload(opts: Mapping[str, Any]) -> Workload:
    """No options (the group size is Jepsen's default, which the checker knows)."""
    return Workload(
        name="long-fork",
        client=TxnWorker(),
        generator=LongForkOps(),
        final_generator=None,
        checkers=["long-fork", "stats", "perf"],
        model=None,
        idempotent=frozenset(),
        protocol=PROTOCOL,
    )
