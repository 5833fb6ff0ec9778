"""The register workload (Jepsen's linearizable-register, with independent keys).

Keys are ints taken in order; client threads work in groups of ``threads_per_key`` (default: the
node count), each group on one key at a time, for about ``per_key_limit`` ops (default 100, scaled
by a random 0.9..1.0 so keys do not end together on a fault boundary). Per key, a random mix of
``read`` (value None; ok value int or None), ``write`` (value 0..4; one write draw in
:data:`DELETE_ONE_IN` is a ``delete`` instead, value None: the key is absent afterwards, a write of
nil) and ``cas`` (value ``[expected, new]``; ok = applied, fail = not applied, with
``compare_failed: true`` when the current value was not ``expected``), through the DB's
``register`` client (:class:`chaos.control.client.RegisterClient`; a client without the optional
``delete`` fails a delete: ``fail``, nothing done). Checked for linearizability per key with the
cas-register model (initial value None; a delete is a write of nil, knossos's and porcupine's
model of it).

The DB decides how its client reaches the register (which node answers a read, redirects); a
completion records the answering ``node`` and any fields the DB's client adds.
"""

from __future__ import annotations

import itertools
from typing import Any

from chaos.control import generator as gen
from chaos.control.client import Answer, Failed, ProtocolWorker, complete
from chaos.control.test import Test
from chaos.history.op import Op
from chaos.workloads import Workload

VALUES = 5
DELETE_ONE_IN = VALUES + 1  # a write draws one of the values or, as often as any one value, a delete
PROTOCOL = "register"


class RegisterWorker(ProtocolWorker):
    """The Jepsen client of one worker: opens the DB's ``register`` client for its node at the
    first op of each process (a crashed process gets a new one) and maps each op onto it."""

    protocol = PROTOCOL

    def open(self, test: Test, node: str) -> RegisterWorker:
        return RegisterWorker(node)

    def invoke(self, test: Test, op: Op) -> Op:
        k = op.key
        if op.f == "read":
            return complete(op, lambda: self.client(test, op).read(k), test=test)
        if op.f == "write":
            return complete(
                op, lambda: self.client(test, op).write(k, op.value), lambda _: op.value, test=test
            )
        if op.f == "cas":
            expected, new = op.value

            def cas() -> Any:
                r = self.client(test, op).cas(k, expected, new)
                applied = r.value if isinstance(r, Answer) else r
                if not applied:
                    # a definite compare failure: the checker may use it as a cas that returned false
                    node = r.node if isinstance(r, Answer) else None
                    raise Failed("cas: expected value did not match", node=node, compare_failed=True)
                return r

            return complete(op, cas, lambda _: op.value, test=test)
        if op.f == "delete":

            def delete() -> Any:
                client = self.client(test, op)
                if not callable(getattr(client, "delete", None)):  # an optional method of the protocol
                    raise Failed(
                        f"delete: the {PROTOCOL} client {type(client).__name__} has no delete",
                        unsupported=True,
                    )
                return client.delete(k)

            return complete(op, delete, lambda _: None, test=test)
        raise ValueError(f"register client: unknown f {op.f!r}; expected read, write, cas or delete")


def _read(test: Test, ctx: gen.Context) -> dict[str, Any]:
    return {"f": "read", "value": None}


def _write(test: Test, ctx: gen.Context) -> dict[str, Any]:
    v = ctx.rng.randrange(DELETE_ONE_IN)
    return {"f": "delete", "value": None} if v == VALUES else {"f": "write", "value": v}


def _cas(test: Test, ctx: gen.Context) -> dict[str, Any]:
    return {"f": "cas", "value": [ctx.rng.randrange(VALUES), ctx.rng.randrange(VALUES)]}


def workload(opts: dict[str, Any]) -> Workload:
    """Options: ``node_count``, ``per_key_limit`` (ops per key), ``threads_per_key``, ``seed``."""
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
        client=RegisterWorker(),
        generator=gen.independent_concurrent(tpk, itertools.count(), per_key_gen),
        final_generator=None,
        checkers=["linear", "stats", "perf"],
        model="cas-register",
        idempotent=frozenset({"read"}),
        protocol=PROTOCOL,
    )
