"""What the transactional workloads (``list-append``, ``rw-register``) share: Elle's generator of
transactions and the client template that runs them through the DB's ``txn`` client
(:class:`chaos.control.client.TxnClient`).

The generator follows Elle's ``elle.txn/wr-txns`` (jepsen-io/elle): ``key_count`` keys are active
at a time; each transaction has ``min_txn_length`` to ``max_txn_length`` micro-ops, each a read
(``["r", k, None]``) or a write (``["append", k, v]`` or ``["w", k, v]``) with even odds, on an
active key drawn from an exponential distribution over the active slots (the first slot about ten
times as likely as the last, so some keys are hot and contended). Values are unique per key:
1, 2, 3, ... in the order the generator hands them out. A key that got ``max_writes_per_key``
writes is retired and its slot takes a fresh key, so reads of a list stay short and the checker's
work stays linear. The generator is pure (its state travels in the generator value), as
:mod:`chaos.control.generator` requires.

Ops are ``{"f": "txn", "value": [[f, k, v], ...]}``; the completion's value is the client's
answer, the same micro-ops with the reads filled in (Elle's history shape, JSON Lines on disk;
``chaos.history.formats`` reads Jepsen's EDN ``{:f :txn :value [[:append 3 7] [:r 4 nil]]}`` into
the same shape).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from typing import Any

from chaos.control import generator as gen
from chaos.control.client import Answer, ProtocolWorker, complete
from chaos.control.test import Test
from chaos.history.op import Op
from chaos.workloads import Workload

PROTOCOL = "txn"
F = "txn"
DEFAULTS = {"key_count": 10, "min_txn_length": 1, "max_txn_length": 4, "max_writes_per_key": 32}


def txn_options(opts: Mapping[str, Any]) -> dict[str, int]:
    """The generator's options from a run's ``opts`` (absent or None: :data:`DEFAULTS`);
    ValueError for a count below 1 or ``min_txn_length > max_txn_length``."""
    out = {k: int(v if opts.get(k) is None else opts[k]) for k, v in DEFAULTS.items()}
    if min(out.values()) < 1:
        raise ValueError(f"transactional workload: every count must be >= 1, got {out}")
    if out["min_txn_length"] > out["max_txn_length"]:
        raise ValueError(
            f"transactional workload: min_txn_length {out['min_txn_length']} > max_txn_length "
            f"{out['max_txn_length']}"
        )
    return out


class TxnOps(gen.Generator):
    """Elle's ``wr-txns`` as a pure generator (see the module docstring). ``write`` is the write
    micro-op's name (``append`` or ``w``); ``keys`` the active key of each slot; ``writes`` the
    writes handed out per active key; ``next_key`` the next fresh key."""

    __slots__ = ("write", "opts", "keys", "writes", "next_key")

    def __init__(
        self,
        write: str,
        opts: Mapping[str, int],
        keys: tuple[int, ...] | None = None,
        writes: Mapping[int, int] | None = None,
        next_key: int | None = None,
    ) -> None:
        self.write = write
        self.opts = opts
        n = opts["key_count"]
        self.keys = keys if keys is not None else tuple(range(n))
        self.writes = writes if writes is not None else {}
        self.next_key = next_key if next_key is not None else n

    def op(self, test: Test | None, ctx: gen.Context) -> gen.OpResult:
        mops, keys, writes, next_key = draw_txn(
            ctx.rng, self.write, self.opts, self.keys, self.writes, self.next_key
        )
        op = gen.fill_in_op({"f": F, "value": mops}, ctx)
        if op is gen.PENDING:
            return gen.PENDING, self
        return op, TxnOps(self.write, self.opts, keys, writes, next_key)


def draw_txn(
    rng: random.Random,
    write: str,
    opts: Mapping[str, int],
    keys: tuple[int, ...],
    writes: Mapping[int, int],
    next_key: int,
) -> tuple[list[list[Any]], tuple[int, ...], dict[int, int], int]:
    """One transaction of Elle's ``wr-txns`` (see the module docstring) drawn with ``rng`` (a
    ``random.Random``) from the state ``keys`` (the active key of each slot), ``writes`` (writes
    handed out per active key) and ``next_key``; returns ``(micro-ops, keys, writes, next_key)``
    after it, leaving the arguments unchanged (the simulator keeps this state itself)."""
    slots = list(keys)
    counts = dict(writes)
    mops: list[list[Any]] = []
    for _ in range(rng.randint(opts["min_txn_length"], opts["max_txn_length"])):
        slot = _exponential_slot(rng.random(), len(slots))
        k = slots[slot]
        if rng.random() < 0.5:
            mops.append(["r", k, None])
            continue
        count = counts.get(k, 0) + 1
        counts[k] = count
        mops.append([write, k, count])
        if count >= opts["max_writes_per_key"]:  # retire the key; its slot takes a fresh one
            counts.pop(k)
            slots[slot] = next_key
            next_key += 1
    return mops, tuple(slots), counts, next_key


def _exponential_slot(u: float, n: int) -> int:
    """Slot ``i`` of ``n`` with probability proportional to ``10 ** (-i / (n - 1))``, from a
    uniform ``u`` in [0, 1) (inverse of the truncated exponential distribution)."""
    if n <= 1:
        return 0
    rate = math.log(10) / (n - 1)
    x = -math.log(1 - u * (1 - math.exp(-rate * n))) / rate
    return min(n - 1, int(x))


class TxnWorker(ProtocolWorker):
    """The Jepsen client of one worker: the DB's ``txn`` client for its node (opened at the first op
    of each process); an answer that does not match the transaction (another length, another
    micro-op or key at some position) is recorded ``info`` with the mismatch as its error."""

    protocol = PROTOCOL

    def open(self, test: Test, node: str) -> TxnWorker:
        return TxnWorker(node)

    def invoke(self, test: Test, op: Op) -> Op:
        if op.f != F:
            raise ValueError(f"txn client: unknown f {op.f!r}; expected {F!r}")
        mops = [list(m) for m in op.value]

        def run() -> Any:
            got = self.client(test, op).txn(mops)
            if isinstance(got, Answer):
                return Answer(_checked(mops, got.value), got.node, got.fields)
            return _checked(mops, got)

        return complete(op, run, test=test)


def _checked(mops: list[list[Any]], got: Any) -> list[list[Any]]:
    if not isinstance(got, list | tuple) or len(got) != len(mops):
        raise TypeError(f"the txn client answered {got!r:.120} for {len(mops)} micro-ops")
    out = []
    for i, (m, g) in enumerate(zip(mops, got, strict=True)):
        if not isinstance(g, list | tuple) or len(g) != 3 or g[0] != m[0] or g[1] != m[1]:
            raise TypeError(f"the txn client answered {g!r:.80} for micro-op {i} {m!r}")
        out.append([m[0], m[1], g[2] if m[0] == "r" else m[2]])
    return out


def txn_workload(name: str, write: str, opts: Mapping[str, Any]) -> Workload:
    """The workload ``name`` whose writes are ``write`` micro-ops (see the module docstring)."""
    return Workload(
        name=name,
        client=TxnWorker(),
        generator=TxnOps(write, txn_options(opts)),
        final_generator=None,
        checkers=["elle", "stats", "perf"],
        model=None,
        idempotent=frozenset(),
        protocol=PROTOCOL,
        value_kind="list" if write == "append" else "register",
    )
