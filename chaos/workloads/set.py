"""The set workload (Jepsen's set tests checked by ``jepsen.checker/set-full``): ``add`` of unique
ints (0, 1, 2, ...) and ``read`` of the whole set during the run (a share ``read_fraction``, default
0.25, of the ops), then one ``read`` per node after healing, through the DB's ``set`` client
(:class:`SetClient`). Client thread ``i`` works on node ``i mod n``, so reads come from every node.

Checked by ``set-full-linearizable`` (set-full with ``:linearizable? true``: lost, duplicated,
unexpected and stale elements are invalid; never-read counted; stable and lost latencies), as a
DB that promises linearizable reads is tested; ``stats``, ``perf``.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from chaos.control import generator as gen
from chaos.control.client import ProtocolWorker, complete
from chaos.control.test import Test
from chaos.history.op import Op
from chaos.workloads import Workload

PROTOCOL = "set"


@runtime_checkable
class SetClient(Protocol):
    """The ``set`` protocol: ``add(element)`` adds an int atomically; ``read()`` -> every element
    (a list, in any order) as the client's node serves it; ``close()``."""

    def add(self, element: int) -> Any: ...

    def read(self) -> Any: ...

    def close(self) -> None: ...


class SetOps(gen.Generator):
    """``add`` of ``next, next+1, ...`` mixed with ``read`` (a share ``read_fraction`` drawn with
    ``ctx.rng``); pure: the counter is in the generator value."""

    __slots__ = ("next", "read_fraction")

    def __init__(self, next: int = 0, read_fraction: float = 0.25) -> None:
        self.next = next
        self.read_fraction = read_fraction

    def op(self, test: Test | None, ctx: gen.Context) -> gen.OpResult:
        if ctx.rng.random() < self.read_fraction:
            op = gen.fill_in_op({"f": "read", "value": None}, ctx)
            return op, self
        op = gen.fill_in_op({"f": "add", "value": self.next}, ctx)
        if op is gen.PENDING:
            return gen.PENDING, self
        return op, SetOps(self.next + 1, self.read_fraction)


class SetWorker(ProtocolWorker):
    """The Jepsen client of one worker: the DB's ``set`` client for its node; a final read naming
    another node reads through a client of that node."""

    protocol = PROTOCOL

    def open(self, test: Test, node: str) -> SetWorker:
        return SetWorker(node)

    def invoke(self, test: Test, op: Op) -> Op:
        if op.f == "add":
            return complete(op, lambda: self.client(test, op).add(op.value), lambda _: op.value)
        if op.f == "read":
            return complete(op, lambda: self.read_list_on(test, op))
        raise ValueError(f"set client: unknown f {op.f!r}; expected add or read")


def workload(opts: dict[str, Any]) -> Workload:
    """Options: ``node_names`` (for the final reads), ``read_fraction`` (default 0.25)."""
    names = list(opts.get("node_names") or [])
    frac = float(0.25 if opts.get("read_fraction") is None else opts["read_fraction"])
    if not 0.0 <= frac < 1.0:
        raise ValueError(f"set: read_fraction {frac} must be in [0, 1)")
    final = [{"f": "read", "value": None, "node": n} for n in names] if names else None
    return Workload(
        name="set",
        client=SetWorker(),
        generator=SetOps(0, frac),
        final_generator=final,
        checkers=["set-full-linearizable", "stats", "perf"],
        model=None,
        idempotent=frozenset({"read"}),
        protocol=PROTOCOL,
    )
