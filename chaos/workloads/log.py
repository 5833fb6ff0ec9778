"""The log workload: unique appends to the DLedger log, reads of every node's log during the run
and a final read of every node's log after healing (Jepsen's set-full, for an append log).

Main phase, a random mix (``read_fraction`` of the ops are reads, default 0.25):

- ``append`` of unique ints (0, 1, 2, ...; the entry body is ``str(v).encode()``), ok value ``v``
  with extra field ``log_index`` (the DLedger index it got);
- ``read-range`` on the worker's own node, which it never leaves (DLedger's GET is member-local,
  ``DLedgerClient.get`` with ``prefer=node`` does not redirect): METADATA gives the node's
  ``commitIndex`` ``c``; then GET of ``max(0, c - window + 1)``, ``+1``, ... until the node answers
  INDEX_OUT_OF_RANGE (``to_end: true``) or ``window + 64`` entries were read. Ok value ``[...]``
  where ``value[k]`` is the workload value at index ``from_index + k`` (None for a non-workload
  entry), extra fields ``from_index``, ``to_end`` and ``commit_index``; ok with a shorter list
  (``to_end: false``) when a later GET failed, fail when the first did.

GET is DLedger's only read path of the log (``DLedgerServer.handleGet``); the server's read modes
(raft-log, read-index, lease, unsafe) are paths of the KV state machine, read by the register
workload. Reads go to every node because client thread ``i`` works on node ``i mod n``, leaders
and deposed leaders included.

Final phase, once per node after healing: ``read`` with ``node`` the node read; ok value ``[...]``
from index 0, committed entries only. Checked by the log checker (final logs: lost, duplicated,
unexpected, reordered, divergent) and the ``log-reads`` checker (every read: an entry seen at an
index and later another at the same index, an element seen or acknowledged and later absent, a
value no client wrote; stale reads and the latency until stable), both in
``chaos.history.logcheck``.
"""

from __future__ import annotations

import time
from typing import Any

from chaos.control import generator as gen
from chaos.history.op import FAIL, OK, Op
from chaos.workloads import Workload
from chaos.workloads.register import outcome_completion

READ_RANGE = "read-range"


class LogOps(gen.Generator):
    """``append`` ops with values ``next, next+1, ...`` mixed with ``read-range`` ops (a fraction
    ``read_fraction`` drawn with ``ctx.rng``); pure: the counter is in the generator value."""

    __slots__ = ("next", "read_fraction")

    def __init__(self, next: int = 0, read_fraction: float = 0.0) -> None:
        self.next = next
        self.read_fraction = read_fraction

    def op(self, test: Any, ctx: gen.Context) -> gen.OpResult:
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


def _decode(body: Any) -> int | None:
    if not body:
        return None
    try:
        return int(bytes(body).decode())
    except (ValueError, UnicodeDecodeError):
        return None


class LogClient:
    """One DLedger client per worker, preferring its node; reads never leave the node read."""

    def __init__(self, c: Any = None, node: str | None = None, retries: int = 20, window: int = 16) -> None:
        self.c = c
        self.node = node
        self.retries = retries
        self.window = window

    def open(self, test: Any, node: str) -> LogClient:
        return LogClient(test.db.client(test.nodes, node), node, self.retries, self.window)

    def invoke(self, test: Any, op: Op) -> Op:
        if op.f == "append":
            r = self.c.append(str(op.value).encode())
            comp = outcome_completion(op, r, op.value)
            if comp.type == OK:
                comp.extra["log_index"] = r.index
            return comp
        if op.f == READ_RANGE:
            return self._read_range(op)
        if op.f == "read":
            return self._read_all(test, op)
        raise ValueError(f"log client: unknown f {op.f!r}; expected append, {READ_RANGE} or read")

    def _read_range(self, op: Op) -> Op:
        node = self.node
        m = self.c.metadata()
        if m.outcome != OK or getattr(m, "node", node) not in (None, node):
            return op.completion(FAIL, error=f"metadata of {node}: {m.error}", node=node)
        raw = m.raw or {}
        commit = raw.get("commitIndex", -1)
        begin = raw.get("ledgerBeginIndex", 0)
        if type(commit) is not int or type(begin) is not int:
            return op.completion(FAIL, error=f"metadata of {node} without commitIndex", node=node)
        start = max(0, begin, commit - self.window + 1)
        values: list[int | None] = []
        to_end = False
        error = None
        for i in range(start, start + self.window + 64):
            r = self.c.get(i)
            if r.outcome == OK and getattr(r, "node", node) not in (None, node):
                error = f"read answered by {r.node}, not {node}"
                break
            if r.outcome == OK and r.body is not None:
                values.append(_decode(r.body))
                continue
            if r.outcome == OK or getattr(r, "code", None) in _OUT_OF_RANGE:
                to_end = True
            else:
                error = f"read of index {i} failed: {r.error}"
            break
        if not values and not to_end:
            return op.completion(FAIL, error=error, node=node)
        comp = op.completion(OK, values, node=node, from_index=start, to_end=to_end, commit_index=commit)
        if error:
            comp.error = error
        return comp

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
        client=LogClient(window=window),
        generator=LogOps(0, frac),
        final_generator=final,
        checkers=["log", "log-reads", "stats", "perf"],
        model=None,
        idempotent=frozenset({"read", READ_RANGE}),
    )
