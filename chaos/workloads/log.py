"""The log workload: unique appends to the DB's log, reads of every node's log during the run
and a final read of every node's log after healing (Jepsen's set-full, for an append log), through
the DB's ``log`` client (:class:`chaos.control.client.LogClient`).

Main phase, a random mix (``read_fraction`` of the ops are reads, default 0.25):

- ``append`` of unique ints (0, 1, 2, ...), ok value ``v`` with extra field ``log_index`` (the
  index the DB gave it, when its client says);
- ``read-range`` on the worker's own node: the client's ``read_recent(window)`` (the entries from
  about ``window`` below the node's commit index to its end), ok value ``[...]`` where
  ``value[k]`` is the workload value at index ``from_index + k`` (None for a non-workload entry),
  extra fields ``from_index``, ``to_end`` and ``commit_index``; a client without ``read_recent``
  reads the node's whole log (``from_index`` 0, ``to_end`` true).

Reads go to every node because client thread ``i`` works on node ``i mod n``, leaders and deposed
leaders included; the DB's client must answer a read from the node it was opened for.

Final phase, once per node after healing: ``read`` with ``node`` the node read; ok value ``[...]``
from index 0, committed entries only. Checked by the log checker (final logs: lost, duplicated,
unexpected, reordered, divergent) and the ``log-reads`` checker (every read: an entry seen at an
index and later another at the same index, an element seen or acknowledged and later absent, a
value no client wrote; stale reads and the latency until stable), both in
``chaos.history.checkers.logcheck``.
"""

from __future__ import annotations

from typing import Any

from chaos.control import generator as gen
from chaos.control.client import Answer, ProtocolWorker, complete
from chaos.control.test import Test
from chaos.history.op import OK, Op
from chaos.workloads import Workload

READ_RANGE = "read-range"
PROTOCOL = "log"


class LogOps(gen.Generator):
    """``append`` ops with values ``next, next+1, ...`` mixed with ``read-range`` ops (a fraction
    ``read_fraction`` drawn with ``ctx.rng``); pure: the counter is in the generator value."""

    __slots__ = ("next", "read_fraction")

    def __init__(self, next: int = 0, read_fraction: float = 0.0) -> None:
        self.next = next
        self.read_fraction = read_fraction

    def op(self, test: Test | None, ctx: gen.Context) -> gen.OpResult:
        if self.read_fraction > 0 and ctx.rng.random() < self.read_fraction:
            op = gen.fill_in_op({"f": READ_RANGE, "value": None}, ctx)
            if op is gen.PENDING:
                return gen.PENDING, self
            return op, self
        op = gen.fill_in_op({"f": "append", "value": self.next}, ctx)
        if op is gen.PENDING:
            return gen.PENDING, self
        return op, LogOps(self.next + 1, self.read_fraction)


class UniqueAppends(LogOps):
    """``append`` ops only (the log workload before reads during the run)."""

    def __init__(self, next: int = 0) -> None:
        super().__init__(next, 0.0)


class LogWorker(ProtocolWorker):
    """The Jepsen client of one worker: the DB's ``log`` client for its node (opened at the first op
    of each process), and for a final read of another node a client of that node."""

    protocol = PROTOCOL

    def __init__(self, node: str | None = None, window: int = 16) -> None:
        super().__init__(node)
        self.window = window

    def open(self, test: Test, node: str) -> LogWorker:
        return LogWorker(node, self.window)

    def invoke(self, test: Test, op: Op) -> Op:
        if op.f == "append":
            index: list[Any] = []

            def append() -> Any:
                r = self.client(test, op).append(op.value)
                index.append(r.value if isinstance(r, Answer) else r)
                return r

            comp = complete(op, append, lambda _: op.value, test=test)
            if comp.type == OK and isinstance(index[0], int):
                comp.extra["log_index"] = index[0]
            return comp
        if op.f == READ_RANGE:
            return complete(op, lambda: self._read_range(test, op), test=test)
        if op.f == "read":
            return complete(op, lambda: self.read_list_on(test, op), test=test)
        raise ValueError(f"log client: unknown f {op.f!r}; expected append, {READ_RANGE} or read")

    def _read_range(self, test: Test, op: Op) -> Any:
        c = self.client(test, op)
        recent = getattr(c, "read_recent", None)
        if recent is not None:
            return recent(self.window)
        r = c.read()
        values = r.value if isinstance(r, Answer) else r
        return Answer(list(values), self.node, {"from_index": 0, "to_end": True})


def workload(opts: dict[str, Any]) -> Workload:
    """Options: ``node_names`` (list of node names, for the final reads), ``read_fraction`` (share
    of ``read-range`` ops in the main phase, default 0.25; 0 = final reads only), ``read_window``
    (entries below the commit index each read starts at, default 16)."""
    names = list(opts.get("node_names") or [])
    frac = float(opts.get("read_fraction", 0.25) if opts.get("read_fraction") is not None else 0.25)
    window = int(opts.get("read_window") or 16)
    if not 0.0 <= frac < 1.0 or window < 1:
        raise ValueError(f"log: read_fraction {frac} must be in [0, 1) and read_window {window} >= 1")
    final = [{"f": "read", "value": None, "node": n} for n in names] if names else None
    return Workload(
        name="log",
        client=LogWorker(window=window),
        generator=LogOps(0, frac),
        final_generator=final,
        checkers=["log", "log-reads", "stats", "perf"],
        model=None,
        idempotent=frozenset({"read", READ_RANGE}),
        protocol=PROTOCOL,
    )
