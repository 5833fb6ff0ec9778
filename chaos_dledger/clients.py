"""DLedger's clients for the workloads' protocols (:mod:`chaos.control.client`): ``register``
and ``txn`` over the DLedger KV state machine and ``log`` over the DLedger log, all through
``dledger.client.DLedgerClient``.

Txn (``DLedgerClient.kv_txn``, key ``"t<key>"``): one transaction is one ``txn`` entry, applied
atomically by the KV state machine; a read-only one is served through the server's read mode by the
worker's node first (a follower refuses it unless the mode is ``unsafe``, and the client follows
the redirect to the leader), a writing one goes to the leader. An aborted transaction is DLedger's
UNEXPECTED_ARGUMENT answer, a ``fail``.

Register (``DLedgerClient.kv_get/kv_put/kv_cas/kv_delete``, key ``"r<key>"``). Sticky processes (``sticky``,
default on): odd-numbered processes read from the node they were given and nowhere else
(``DLedgerClient(sticky=True)``: no leader discovery) and record that node's answer; a NOT_LEADER
that names another leader is followed once through the redirecting client, as DLedger's own client
does (the completion says ``redirected_from``), and one naming none is a ``fail``. Their writes and cas go through the redirecting client, which still reaches
a deposed leader it believes in. So a deposed leader that still answers reads (a read-index read
without its heartbeat round, a lease read after the lease ran out, a paused leader resuming with
queued reads) is observed, while the other processes follow the leader. Since client thread ``i``
works on node ``i mod n`` and a key's threads are consecutive, each key has sticky and following
processes on several nodes, on both sides of a partition. Completions of sticky reads carry
``sticky: true``. A sticky read waits :data:`STICKY_READ_TIMEOUT_S` (longer than the client timeout)
so a read sent to a paused leader is answered, or refused, when it resumes: the queued-read case of
Jepsen's pause nemesis, where a deposed leader answers before it hears of the new term.

Bank, counter, set (Jepsen's workloads of the same names): one ``kv_txn`` per op with the KV state
machine's ``init`` / ``add`` / ``sadd`` micro-ops (atomic per entry, :mod:`dledger.statemachine`),
reads as read-only transactions through the read mode, like ``txn``; see the client classes.

Log: ``append`` is DLedger's APPEND (redirected to the leader), answering the index; ``read`` and
``read_recent`` use GET, which is member-local (``DLedgerServer.handleGet``; ``prefer=node`` does not
redirect), so a read never leaves the node read. ``read_recent(window)``: METADATA gives the node's
``commitIndex`` ``c``; then GET of ``max(0, c - window + 1)``, ``+1``, ... until the node answers
INDEX_OUT_OF_RANGE (``to_end``) or ``window + 64`` entries were read.

A DLedger ``Result`` maps onto the protocol: ``ok`` -> the value, ``fail`` -> :class:`Failed`
(DLedger refused: NOT_LEADER, a definite error), ``info`` -> :class:`Indeterminate` (timeout).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from chaos.api import Answer, Failed, Indeterminate

STICKY_READ_TIMEOUT_S = 10.0
NOT_LEADER = 404  # dledger.protocol.ResponseCode.NOT_LEADER
# DLedger's INDEX_OUT_OF_RANGE (reading past the end / below the start)
OUT_OF_RANGE = frozenset({410, 419})

Connect = Callable[[str], Any]
"""node name -> a ``DLedgerClient`` talking to that node first."""


def kv_key(key: Any) -> str:
    return f"r{key}"


def _decode(body: Any) -> int | None:
    if not body:
        return None
    try:
        return int(bytes(body).decode())
    except (ValueError, UnicodeDecodeError):
        return None


def result(r: Any, value: Any = None, **fields: Any) -> Answer:
    """``Answer(value, r.node, fields)`` for an ok DLedger ``Result``; raises :class:`Failed` for
    ``fail`` and :class:`Indeterminate` for ``info`` or a result without an outcome."""
    outcome = getattr(r, "outcome", None)
    node = getattr(r, "node", None) or None
    if outcome == "ok":
        return Answer(value, node, fields)
    err = str(getattr(r, "error", None) or f"code {getattr(r, 'code', '?')}")
    if outcome == "fail":
        raise Failed(err, node=node, **fields)
    if outcome == "info":
        raise Indeterminate(err, node=node, **fields)
    raise Indeterminate(f"client result without outcome: {r!r}", node=node, **fields)


class DLedgerRegisterClient:
    """The ``register`` protocol for one process on ``node`` (see the module docstring)."""

    def __init__(self, connect: Connect, node: str, process: Any, sticky: bool = True) -> None:
        self.connect = connect
        self.node = node
        self.c = connect(node)
        self.sticky = sticky and isinstance(process, int) and process % 2 == 1
        self.bound: Any = None

    def _reader(self) -> Any:
        # only reads stick: a write or cas a deposed leader takes blocks its thread for the whole
        # client timeout (it cannot commit), so sticky writes would starve the reads that matter
        if not self.sticky:
            return self.c
        if self.bound is None:
            self.bound = self.connect(self.node)
            self.bound.sticky = True
            self.bound.timeout = max(float(self.bound.timeout), STICKY_READ_TIMEOUT_S)
        return self.bound

    def read(self, key: Any) -> Answer:
        r = self._reader().kv_get(kv_key(key))
        extra: dict[str, Any] = {"sticky": True} if self.sticky else {}
        hint = getattr(r, "leader_id", None)
        if self.sticky and getattr(r, "code", None) == NOT_LEADER and hint and hint != self.node:
            # a follower that knows the leader redirects, and DLedger's client follows it
            # (DLedgerClient's NOT_LEADER handling): a refusal naming the leader is no outage. A
            # member that still believes it leads answers itself and is observed, as sticky reads
            # are meant to; one that knows no leader refuses, and that is unavailability.
            r = self.c.kv_get(kv_key(key))
            extra["redirected_from"] = self.node
        return result(r, getattr(r, "value", None), **extra)

    def write(self, key: Any, value: Any) -> Answer:
        return result(self.c.kv_put(kv_key(key), value), value)

    def cas(self, key: Any, expected: Any, new: Any) -> Answer:
        r = self.c.kv_cas(kv_key(key), expected, new)
        return result(r, bool(getattr(r, "applied", False)))

    def delete(self, key: Any) -> Answer:
        return result(self.c.kv_delete(kv_key(key)), None)

    def close(self) -> None:
        for c in (self.c, self.bound):
            if c is not None:
                c.close()


class DLedgerLogClient:
    """The ``log`` protocol on ``node``; reads never leave the node read."""

    def __init__(self, connect: Connect, node: str, retries: int = 20) -> None:
        self.node = node
        self.retries = retries
        self.c = connect(node)

    def append(self, value: int) -> Answer:
        r = self.c.append(str(value).encode())
        return result(r, getattr(r, "index", None))

    def read_recent(self, window: int) -> Answer:
        node = self.node
        m = self.c.metadata()
        if m.outcome != "ok" or getattr(m, "node", node) not in (None, node):
            raise Failed(f"metadata of {node}: {m.error}", node=node)
        raw = m.raw or {}
        commit = raw.get("commitIndex", -1)
        begin = raw.get("ledgerBeginIndex", 0)
        if type(commit) is not int or type(begin) is not int:
            raise Failed(f"metadata of {node} without commitIndex", node=node)
        start = max(0, begin, commit - window + 1)
        values: list[int | None] = []
        to_end = False
        error = None
        for i in range(start, start + window + 64):
            r = self.c.get(i)
            if r.outcome == "ok" and getattr(r, "node", node) not in (None, node):
                error = f"read answered by {r.node}, not {node}"
                break
            if r.outcome == "ok" and r.body is not None:
                values.append(_decode(r.body))
                continue
            if r.outcome == "ok" or getattr(r, "code", None) in OUT_OF_RANGE:
                to_end = True
            else:
                error = f"read of index {i} failed: {r.error}"
            break
        if not values and not to_end:
            raise Failed(error or "nothing read", node=node)
        fields: dict[str, Any] = {"from_index": start, "to_end": to_end, "commit_index": commit}
        if error:
            fields["error"] = error
        return Answer(values, node, fields)

    def read(self) -> Answer:
        target = self.node
        values: list[int | None] = []
        i = 0
        fails = 0
        while True:
            r = self.c.get(i)
            if r.outcome == "ok" and getattr(r, "node", target) not in (None, target):
                raise Failed(f"read answered by {r.node}, not {target}", node=target)
            if r.outcome == "ok":
                if r.body is None:
                    break  # past the committed end
                values.append(_decode(r.body))
                i += 1
                fails = 0
                continue
            if getattr(r, "code", None) in OUT_OF_RANGE:
                break
            fails += 1
            if fails > self.retries:
                raise Failed(f"read of index {i} failed: {r.error}", node=target)
            time.sleep(0.1)
        return Answer(values, target)

    def close(self) -> None:
        self.c.close()


def txn_key(key: Any) -> str:
    return f"t{key}"


class DLedgerTxnClient:
    """The ``txn`` protocol on ``node`` (see the module docstring)."""

    def __init__(self, connect: Connect, node: str) -> None:
        self.node = node
        self.c = connect(node)

    def txn(self, mops: list[list[Any]]) -> Answer:
        r = self.c.kv_txn([[f, txn_key(k), v] for f, k, v in mops])
        got = getattr(r, "value", None) if getattr(r, "outcome", None) == "ok" else None
        if got is not None and (not isinstance(got, list) or len(got) != len(mops)):
            raise Indeterminate(f"txn answered {got!r:.120}", node=getattr(r, "node", None))
        value = [[f, k, g[2]] for (f, k, _), g in zip(mops, got, strict=True)] if got is not None else None
        return result(r, value)

    def close(self) -> None:
        self.c.close()


class _KVTxn:
    """Base of the bank, counter and set clients: one ``kv_txn`` per op on ``node`` (a read-only
    one through the server's read mode, the worker's node first)."""

    def __init__(self, connect: Connect, node: str) -> None:
        self.node = node
        self.c = connect(node)

    def _txn(self, mops: list[list[Any]]) -> Answer:
        r = self.c.kv_txn(mops)
        got = getattr(r, "value", None) if getattr(r, "outcome", None) == "ok" else None
        if got is not None and (not isinstance(got, list) or len(got) != len(mops)):
            raise Indeterminate(f"txn answered {got!r:.120}", node=getattr(r, "node", None))
        return result(r, [g[2] for g in got] if got is not None else None)

    def close(self) -> None:
        self.c.close()


TXN_ABORTED = "txn aborted:"  # the server's answer to a txn its state machine refused (dledger.driver)


def bank_key(account: Any) -> str:
    return f"a{account}"


class DLedgerBankClient(_KVTxn):
    """The ``bank`` protocol: account ``k`` is the KV key ``"a<k>"``; ``init`` one txn of ``init``
    micro-ops, a transfer one txn of two ``add`` micro-ops (the state machine aborts it, a
    ``fail``, when the balance would go negative), a read one read-only txn of every account.

    A transfer the state machine refused (``txn aborted: ...``: the balance does not cover it) was
    served and its precondition did not hold: ``fail`` with ``compare_failed: true``, a *no match*
    as a cas whose compare did not match (:func:`chaos.history.analysis.fail_class`), not the
    cluster being unavailable."""

    def init(self, balances: dict[int, int]) -> Answer:
        return self._txn([["init", bank_key(a), b] for a, b in balances.items()])

    def transfer(self, frm: int, to: int, amount: int) -> Answer:
        try:
            return self._txn([["add", bank_key(frm), -amount], ["add", bank_key(to), amount]])
        except Failed as e:
            if str(e).startswith(TXN_ABORTED):
                raise Failed(str(e), node=e.node, **{**e.fields, "compare_failed": True}) from None
            raise

    def read(self, accounts: list[int]) -> Answer:
        got = self._txn([["r", bank_key(a), None] for a in accounts])
        return Answer(dict(zip(accounts, got.value, strict=True)), got.node, got.fields)


class DLedgerCounterClient(_KVTxn):
    """The ``counter`` protocol on the KV key ``"counter"``: ``add`` micro-ops, read-only reads."""

    def add(self, delta: int) -> Answer:
        return self._txn([["add", "counter", delta]])

    def read(self) -> Answer:
        got = self._txn([["r", "counter", None]])
        return Answer(got.value[0] or 0, got.node, got.fields)


class DLedgerSetClient(_KVTxn):
    """The ``set`` protocol on the KV key ``"set"``: ``sadd`` micro-ops, read-only reads."""

    def add(self, element: int) -> Answer:
        return self._txn([["sadd", "set", element]])

    def read(self) -> Answer:
        got = self._txn([["r", "set", None]])
        return Answer(list(got.value[0] or []), got.node, got.fields)


def open_client(protocol: str, connect: Connect, node: str, process: Any, *, sticky: bool = True) -> Any:
    """The DLedger client of ``protocol`` (``register``, ``log``, ``txn``, ``bank``, ``counter`` or
    ``set``); ValueError for another."""
    if protocol in _KV_CLIENTS:
        return _KV_CLIENTS[protocol](connect, node)
    if protocol == "register":
        return DLedgerRegisterClient(connect, node, process, sticky)
    if protocol == "log":
        return DLedgerLogClient(connect, node)
    if protocol == "txn":
        return DLedgerTxnClient(connect, node)
    raise ValueError(
        f"DLedger client protocol {protocol!r}: expected register, log, txn, bank, counter or set"
    )


_KV_CLIENTS: dict[str, type[_KVTxn]] = {
    "bank": DLedgerBankClient,
    "counter": DLedgerCounterClient,
    "set": DLedgerSetClient,
}
