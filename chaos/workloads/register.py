"""The register workload (Jepsen's linearizable-register, with independent keys).

Keys are ints taken in order; client threads work in groups of ``threads_per_key`` (default: the
node count), each group on one key at a time, for about ``per_key_limit`` ops (default 100, scaled
by a random 0.9..1.0 so keys do not end together on a fault boundary). Per key, a random mix of
``read`` (value None; ok value int or None), ``write`` (value 0..4) and ``cas`` (value
``[expected, new]``; ok = applied, fail = not applied), through the DLedger KV state machine
(``DLedgerClient.kv_get/kv_put/kv_cas``, key ``"r<key>"``). Checked for linearizability per key with
the cas-register model (initial value None).

Sticky processes (``sticky``, default on): odd-numbered processes read from the node they were
given and nowhere else (``DLedgerClient(sticky=True)``: no leader discovery, no redirect) and record
that node's answer; NOT_LEADER is a ``fail``. Their writes and cas go through the redirecting client,
which still reaches a deposed leader it believes in. So a deposed leader that still answers reads (a read-index read
without its heartbeat round, a lease read after the lease ran out, a paused leader resuming with
queued reads) is observed, while the other processes follow the leader. Since client thread ``i``
works on node ``i mod n`` and a key's ``threads_per_key`` threads are consecutive, each key has
sticky and following processes on several nodes, on both sides of a partition (Jepsen's
``independent/concurrent-generator``). Completions of sticky processes carry ``sticky: true``.
A sticky read waits ``STICKY_READ_TIMEOUT_S`` (longer than the client timeout) so a read sent to a
paused leader is answered, or refused, when it resumes: the queued-read case of Jepsen's pause
nemesis, where a deposed leader answers before it hears of the new term.
"""

from __future__ import annotations

import itertools
from typing import Any

from chaos.control import generator as gen
from chaos.history.op import FAIL, INFO, OK, Op
from chaos.workloads import Workload

VALUES = 5
STICKY_READ_TIMEOUT_S = 10.0


def kv_key(key: Any) -> str:
    return f"r{key}"


def outcome_completion(op: Op, r: Any, value: Any = None, **fields: Any) -> Op:
    """The completion of ``op`` for a DLedger ``Result`` ``r`` (ok / fail / info, error, node)."""
    outcome = getattr(r, "outcome", None)
    if outcome not in (OK, FAIL, INFO):
        return op.completion(INFO, error=f"indeterminate: client result without outcome: {r!r}")
    comp = op.completion(outcome, value if outcome == OK else op.value, **fields)
    err = getattr(r, "error", None)
    if outcome != OK and err:
        comp.error = str(err)
    node = getattr(r, "node", None)
    if node:
        comp.node = node
    return comp


class RegisterClient:
    """One DLedger client per worker, talking to its node first; with ``sticky``, odd processes
    use a second client bound to the node (see the module docstring)."""

    def __init__(self, c: Any = None, node: str | None = None, sticky: bool = True) -> None:
        self.c = c
        self.node = node
        self.sticky = sticky
        self.bound: Any = None

    def open(self, test: Any, node: str) -> RegisterClient:
        return RegisterClient(test.db.client(test.nodes, node), node, self.sticky)

    def _client_for(self, test: Any, op: Op) -> Any:
        # only reads stick: a write or cas a deposed leader takes blocks its thread for the whole
        # client timeout (it cannot commit), so sticky writes would starve the reads that matter
        if not self.sticky or op.f != "read" or not isinstance(op.process, int) or op.process % 2 == 0:
            return self.c
        if self.bound is None:
            self.bound = test.db.client(test.nodes, self.node)
            self.bound.sticky = True
            self.bound.timeout = max(float(self.bound.timeout), STICKY_READ_TIMEOUT_S)
        return self.bound

    def invoke(self, test: Any, op: Op) -> Op:
        c = self._client_for(test, op)
        comp = self._invoke(c, op)
        if c is not self.c:
            comp.extra["sticky"] = True
        return comp

    def _invoke(self, c: Any, op: Op) -> Op:
        k = kv_key(op.key)
        if op.f == "read":
            r = c.kv_get(k)
            return outcome_completion(op, r, getattr(r, "value", None))
        if op.f == "write":
            r = c.kv_put(k, op.value)
            return outcome_completion(op, r, op.value)
        if op.f == "cas":
            expected, new = op.value
            r = c.kv_cas(k, expected, new)
            if r.outcome == OK and not getattr(r, "applied", False):
                # a definite compare failure: the checker may use it as a completed cas that returned false
                return op.completion(
                    FAIL,
                    op.value,
                    error="cas: expected value did not match",
                    node=r.node,
                    compare_failed=True,
                )
            return outcome_completion(op, r, op.value)
        raise ValueError(f"register client: unknown f {op.f!r}; expected read, write or cas")

    def close(self, test: Any) -> None:
        for c in (self.c, self.bound):
            if c is not None:
                c.close()


def _read(test: Any, ctx: gen.Context) -> dict[str, Any]:
    return {"f": "read", "value": None}


def _write(test: Any, ctx: gen.Context) -> dict[str, Any]:
    return {"f": "write", "value": ctx.rng.randrange(VALUES)}


def _cas(test: Any, ctx: gen.Context) -> dict[str, Any]:
    return {"f": "cas", "value": [ctx.rng.randrange(VALUES), ctx.rng.randrange(VALUES)]}


def workload(opts: dict[str, Any]) -> Workload:
    """Options: ``node_count``, ``per_key_limit`` (ops per key), ``threads_per_key``, ``seed``,
    ``sticky`` (default True: odd processes stay on their node)."""
    import random

    n_nodes = int(opts.get("node_count") or 5)
    per_key = int(opts.get("per_key_limit") or 100)
    tpk = int(opts.get("threads_per_key") or n_nodes)
    if per_key < 1 or tpk < 1:
        raise ValueError(f"register: per_key_limit and threads_per_key must be >= 1, got {per_key}, {tpk}")
    krng = random.Random(opts.get("seed", 0))
    limits = {}

    def per_key_gen(k: Any) -> Any:
        limits[k] = max(1, int(per_key * krng.uniform(0.9, 1.0)))
        return gen.limit(limits[k], gen.mix([_read, _write, _cas]))

    return Workload(
        name="register",
        client=RegisterClient(sticky=bool(opts.get("sticky", True))),
        generator=gen.independent_concurrent(tpk, itertools.count(), per_key_gen),
        final_generator=None,
        checkers=["linear", "stats", "perf"],
        model="cas-register",
        idempotent=frozenset({"read"}),
    )
