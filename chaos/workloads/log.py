"""The log workload: unique appends to the DLedger log, then a final read of every node's log.

Main phase: ``append`` of unique ints (0, 1, 2, ...; the entry body is ``str(v).encode()``), ok value
``v`` with extra field ``log_index`` (the DLedger index it got). Final phase, once per node after
healing: ``read`` with ``node`` the node read; ok value ``[...]`` where ``value[i]`` is the workload
value at DLedger index ``i`` or None for a non-workload entry (e.g. the leader's no-op), committed
entries only (``DLedgerClient.get`` with ``prefer=node``). Checked by the log checker
(``chaos.history.logcheck``): every acknowledged append present once at its index, nodes agree on the
committed prefix, nothing unexpected, definitely-failed appends absent.
"""

from __future__ import annotations

import time
from typing import Any

from chaos.control import generator as gen
from chaos.history.op import FAIL, OK, Op
from chaos.workloads import Workload
from chaos.workloads.register import outcome_completion


class UniqueAppends(gen.Generator):
    """``append`` ops with values ``next, next+1, ...`` (pure: the counter is in the value)."""

    __slots__ = ("next",)

    def __init__(self, next: int = 0) -> None:
        self.next = next

    def op(self, test: Any, ctx: gen.Context) -> gen.OpResult:
        op = gen.fill_in_op({"f": "append", "value": self.next}, ctx)
        if op is gen.PENDING:
            return gen.PENDING, self
        return op, UniqueAppends(self.next + 1)


def _decode(body: Any) -> int | None:
    if not body:
        return None
    try:
        return int(bytes(body).decode())
    except (ValueError, UnicodeDecodeError):
        return None


class LogClient:
    """One DLedger client per worker; final reads use a client preferring the node read."""

    def __init__(self, c: Any = None, node: str | None = None, retries: int = 20) -> None:
        self.c = c
        self.node = node
        self.retries = retries

    def open(self, test: Any, node: str) -> LogClient:
        return LogClient(test.db.client(test.nodes, node), node)

    def invoke(self, test: Any, op: Op) -> Op:
        if op.f == "append":
            r = self.c.append(str(op.value).encode())
            comp = outcome_completion(op, r, op.value)
            if comp.type == OK:
                comp.extra["log_index"] = r.index
            return comp
        if op.f == "read":
            return self._read_all(test, op)
        raise ValueError(f"log client: unknown f {op.f!r}; expected append or read")

    def _read_all(self, test: Any, op: Op) -> Op:
        target = op.node or self.node
        c = test.db.client(test.nodes, target) if target != self.node else self.c
        values: list[int | None] = []
        try:
            i = 0
            fails = 0
            while True:
                r = c.get(i)
                if r.outcome == OK and getattr(r, "node", target) not in (None, target):
                    return op.completion(FAIL, error=f"read answered by {r.node}, not {target}", node=target)
                if r.outcome == OK:
                    if r.body is None:
                        break  # past the committed end
                    values.append(_decode(r.body))
                    i += 1
                    fails = 0
                    continue
                if getattr(r, "code", None) in _OUT_OF_RANGE:
                    break
                fails += 1
                if fails > self.retries:
                    return op.completion(FAIL, error=f"read of index {i} failed: {r.error}", node=target)
                time.sleep(0.1)
        finally:
            if c is not self.c:
                c.close()
        return op.completion(OK, values, node=target)

    def close(self, test: Any) -> None:
        if self.c is not None:
            self.c.close()


# DLedger's INDEX_OUT_OF_RANGE (reading past the end / below the start)
_OUT_OF_RANGE = frozenset({410, 419})


def workload(opts: dict[str, Any]) -> Workload:
    """Options: ``node_names`` (list of node names, for the final reads)."""
    names = list(opts.get("node_names") or [])
    final = [{"f": "read", "value": None, "node": n} for n in names] if names else None
    return Workload(
        name="log",
        client=LogClient(),
        generator=UniqueAppends(0),
        final_generator=final,
        checkers=["log", "stats", "perf"],
        model=None,
        idempotent=frozenset({"read"}),
    )
