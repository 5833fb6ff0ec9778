"""The counter workload (Jepsen's counter tests, checked by ``jepsen.checker/counter``): ``add`` of
a small positive integer (1..5) and ``read`` of the counter, a 50/50 mix, through the DB's
``counter`` client (:class:`CounterClient`). The counter starts at 0. Checked by ``counter``:
each ok read lies between the sum of the adds acknowledged before it began and the sum of the adds
that may have applied before it ended; ``stats``, ``perf``.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from chaos.control import generator as gen
from chaos.control.client import ProtocolWorker, complete
from chaos.control.test import Test
from chaos.history.op import Op
from chaos.workloads import Workload

PROTOCOL = "counter"
MAX_ADD = 5


@runtime_checkable
class CounterClient(Protocol):
    """The ``counter`` protocol: ``add(delta)`` adds a positive int atomically (anything returned
    is ignored); ``read()`` -> the counter (an int; 0 before any add); ``close()``."""

    def add(self, delta: int) -> Any: ...

    def read(self) -> Any: ...

    def close(self) -> None: ...


class CounterWorker(ProtocolWorker):
    """The Jepsen client of one worker: the DB's ``counter`` client for its node."""

    protocol = PROTOCOL

    def open(self, test: Test, node: str) -> CounterWorker:
        return CounterWorker(node)

    def invoke(self, test: Test, op: Op) -> Op:
        if op.f == "add":
            return complete(op, lambda: self.client(test, op).add(op.value), lambda _: op.value)
        if op.f == "read":
            return complete(op, lambda: self.client(test, op).read())
        raise ValueError(f"counter client: unknown f {op.f!r}; expected add or read")


def _add(test: Test, ctx: gen.Context) -> dict[str, Any]:
    return {"f": "add", "value": ctx.rng.randint(1, MAX_ADD)}


def _read(test: Test, ctx: gen.Context) -> dict[str, Any]:
    return {"f": "read", "value": None}


def workload(opts: dict[str, Any]) -> Workload:
    """No options."""
    return Workload(
        name="counter",
        client=CounterWorker(),
        generator=gen.mix([_add, _read]),
        final_generator=None,
        checkers=["counter", "stats", "perf"],
        model=None,
        idempotent=frozenset({"read"}),
        protocol=PROTOCOL,
    )
