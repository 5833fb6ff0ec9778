"""The StateMachine interface of DLedger and a linearizable KV state machine built on it.

Follows ``io.openmessaging.storage.dledger.statemachine.StateMachine`` (onApply, onSnapshotSave,
onSnapshotLoad, onShutdown) and its StateMachineCaller: committed entries ``(lastApplied,
commitIndex]`` are applied in index order and client requests complete only after their entry was
applied. Unlike DLedger, :meth:`StateMachine.on_apply` returns one result per entry so the caller can
answer a cas with whether it applied.

Transactions (``txn``): a list of micro-operations ``["r", key, None]``, ``["w", key, value]``,
``["append", key, value]`` applied atomically as one log entry, in order (a read sees the
transaction's own earlier writes), answered with the same list where each read carries the value
read (None when absent; an appended key holds a list). The micro-op shapes are Elle's
(jepsen-io/elle ``elle.list-append``, ``elle.rw-register``). A transaction that cannot apply (an
append to a key whose value is not a list) changes nothing and answers :class:`TxnAborted`.
"""

from __future__ import annotations

from typing import Any, Protocol

import msgpack

from dledger.store import MAGIC_NORMAL, Entry

KV_PREFIX = b"\x00KV1"
"""Bodies of KV commands start with this; other entries (log workload appends, no-ops) are skipped."""

KV_OPS = ("put", "get", "cas", "delete", "txn")
KV_ARGS: dict[str, tuple[str, ...]] = {"put": ("value",), "cas": ("expected", "new")}
"""Request fields each KV op must carry (present, possibly null); a request without them is refused
with UNEXPECTED_ARGUMENT, never applied as if they were null."""

TXN_FS = ("r", "w", "append", "add", "sadd", "init")
"""The micro-operation kinds of a ``txn`` (Elle's list-append and rw-register; add, sadd and init
for the bank, counter and set workloads)."""


class TxnAborted:
    """The result of a transaction that applied nothing: ``reason`` says why (a definite failure)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def check_txn(mops: Any) -> list[list[Any]]:
    """``mops`` as a list of ``[f, key, value]`` lists (f in :data:`TXN_FS`, key a string);
    ValueError naming the first bad micro-op otherwise. An empty transaction is refused too."""
    if not isinstance(mops, list | tuple) or not mops:
        raise ValueError("txn: expected a non-empty list of [f, key, value] micro-ops")
    out = []
    for i, m in enumerate(mops):
        if not isinstance(m, list | tuple) or len(m) != 3 or m[0] not in TXN_FS or not isinstance(m[1], str):
            raise ValueError(f"txn micro-op {i} {m!r:.80}: expected [{'|'.join(TXN_FS)}, string key, value]")
        if m[0] == "add" and type(m[2]) is not int:
            raise ValueError(f"txn micro-op {i} {m!r:.80}: add expects an integer delta")
        out.append([m[0], m[1], m[2]])
    return out


MAX_TXN_OPS = 10_000
"""Micro-ops one transaction request may carry; a longer one is refused before it is proposed
(Elle's transactions hold a handful). Entries already in a log apply whatever their length."""


MAX_TXN_READ_VALUES = 1_000_000
"""List elements one transaction may read in all; past it the transaction aborts (its answer would
otherwise grow with the state, not with the request: 10,000 reads of a long list)."""


def check_txn_request(mops: Any) -> list[list[Any]]:
    """:func:`check_txn` for a client's request, which is also bounded: ValueError naming the limit
    for more than :data:`MAX_TXN_OPS` micro-ops (checked first, before any work per micro-op)."""
    if isinstance(mops, list | tuple) and len(mops) > MAX_TXN_OPS:
        raise ValueError(f"txn of {len(mops)} micro-ops: at most {MAX_TXN_OPS} per transaction")
    return check_txn(mops)


def is_read_only(mops: list[list[Any]]) -> bool:
    """True when every micro-op of a (checked) transaction is a read."""
    return all(m[0] == "r" for m in mops)


def encode_txn(mops: Any) -> bytes:
    """The entry body of a ``txn`` command (:func:`check_txn`'s ValueError for bad micro-ops)."""
    return encode_kv("txn", "", check_txn(mops))


class StateMachine(Protocol):
    """What the StateMachineCaller drives (DLedger's StateMachine)."""

    def on_apply(self, entries: list[Entry]) -> list[Any]:
        """Apply committed ``entries`` (consecutive, in index order); one result per entry."""
        ...

    def on_snapshot_save(self) -> bytes:
        """The state as bytes, consistent with every entry applied so far."""
        ...

    def on_snapshot_load(self, data: bytes) -> None:
        """Replace the state with one saved by :meth:`on_snapshot_save`."""
        ...

    def on_shutdown(self) -> None: ...


def encode_kv(op: str, key: str, *args: Any) -> bytes:
    """The entry body of a KV command; ValueError for an unknown op or a non-string key."""
    if op not in KV_OPS:
        raise ValueError(f"kv op {op!r}: expected one of {KV_OPS}")
    if not isinstance(key, str):
        raise ValueError(f"kv key {key!r}: expected a string")
    return KV_PREFIX + msgpack.packb([op, key, *args], use_bin_type=True)


def decode_kv(body: bytes) -> list[Any] | None:
    """``[op, key, *args]`` of a KV command body, or None for any other body (never raises)."""
    if not body.startswith(KV_PREFIX):
        return None
    try:
        cmd = msgpack.unpackb(body[len(KV_PREFIX) :], raw=False, strict_map_key=False)
    except Exception:
        return None
    if not isinstance(cmd, list) or len(cmd) < 2 or cmd[0] not in KV_OPS or not isinstance(cmd[1], str):
        return None
    return cmd


class KVStateMachine:
    """A dict of string keys to msgpack/JSON-able values; writes and raft-log reads go through the log.

    Commands: ``put(key, value)`` -> None; ``get(key)`` -> value or None when absent;
    ``cas(key, expected, new)`` -> True when the current value equalled ``expected`` (None means
    absent) and was replaced; ``delete(key)`` -> True when the key existed.
    """

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}
        self.last_applied = -1

    def apply_command(self, cmd: list[Any]) -> Any:
        op, key, args = cmd[0], cmd[1], cmd[2:]
        if op == "put" and len(args) == 1:
            if args[0] is None:
                self.data.pop(key, None)  # None means absent, as for cas
            else:
                self.data[key] = args[0]
            return None
        if op == "get":
            return self.data.get(key)
        if op == "cas" and len(args) == 2:
            cur = self.data.get(key)
            if cur == args[0] and (args[0] is not None or key not in self.data):
                if args[1] is None:
                    self.data.pop(key, None)
                else:
                    self.data[key] = args[1]
                return True
            return False
        if op == "delete":
            return self.data.pop(key, _MISSING) is not _MISSING
        if op == "txn" and len(args) == 1:
            try:
                mops = check_txn(args[0])
            except ValueError as e:
                return TxnAborted(str(e))
            return self.apply_txn(mops)
        return None

    def apply_txn(self, mops: list[list[Any]]) -> list[list[Any]] | TxnAborted:
        """Apply a checked transaction atomically: its writes go to a private view first and reach
        :attr:`data` only when every micro-op applied. Returns the completed micro-ops (reads with
        their values) or :class:`TxnAborted` (nothing changed)."""
        view: dict[str, Any] = {}  # key -> its value within the transaction (_MISSING: absent)
        # keys whose list in ``view`` is the transaction's own copy: appended to in place, so a
        # transaction of n appends costs O(n), not O(n^2) (a 100,000-append one took 5-50 s)
        owned: set[str] = set()
        # for owned keys a sadd has touched: the list's members as hashable keys (:func:`_member`),
        # so a transaction of n sadds to a list of L values costs O(n + L), not O(n * L) (10,000
        # sadds to a 100,000-value list took 7 s, long enough for the leader to lose its lease)
        members: dict[str, set[Any]] = {}
        read_values = 0
        out: list[list[Any]] = []
        for f, key, value in mops:
            cur: Any = view[key] if key in view else self.data.get(key, _MISSING)
            if f == "r":
                # values in ``data`` are never changed in place (a transaction copies a list before
                # its first append), so only a list this transaction owns needs a copy
                if cur is not _MISSING and isinstance(cur, list):
                    read_values += len(cur)
                    if read_values > MAX_TXN_READ_VALUES:
                        return TxnAborted(f"reads of more than {MAX_TXN_READ_VALUES} values in one txn")
                    if key in owned:
                        cur = list(cur)
                out.append([f, key, None if cur is _MISSING else cur])
                continue
            if f == "w":
                view[key] = _MISSING if value is None else value
                owned.discard(key)
                members.pop(key, None)
            elif f == "init":
                if cur is _MISSING and value is not None:
                    view[key] = value
                    owned.discard(key)
                    members.pop(key, None)
            elif f != "add" and key in owned:
                if f == "append":
                    cur.append(value)
                    if key in members:
                        members[key].add(_member(value))
                else:  # sadd: exactly ``value not in cur``, in O(1) after the first on this key
                    seen = members.get(key)
                    if seen is None:
                        seen = members[key] = {_member(v) for v in cur}
                    m = _member(value)
                    if m not in seen:
                        seen.add(m)
                        cur.append(value)
            else:
                new = _combine(f, key, cur, value)
                if isinstance(new, TxnAborted):
                    return new
                view[key] = new
                if f != "add":
                    owned.add(key)
            out.append([f, key, value])
        for key, value in view.items():
            if value is _MISSING:
                self.data.pop(key, None)
            else:
                self.data[key] = value
        return out

    def read_txn(self, mops: list[list[Any]]) -> list[list[Any]] | TxnAborted:
        """A read-only transaction on the local state (the unsafe, read-index and lease paths), or
        :class:`TxnAborted` when it would read more than :data:`MAX_TXN_READ_VALUES` list values, as
        :meth:`apply_txn` (10,000 reads of a 100,000-value list copied 10^9 values)."""
        read_values = 0
        for f, key, _ in mops:
            cur = self.data.get(key) if f == "r" else None
            if isinstance(cur, list):
                read_values += len(cur)
                if read_values > MAX_TXN_READ_VALUES:
                    return TxnAborted(f"reads of more than {MAX_TXN_READ_VALUES} values in one txn")
        return [[f, key, _copy(self.data.get(key))] if f == "r" else [f, key, v] for f, key, v in mops]

    def on_apply(self, entries: list[Entry]) -> list[Any]:
        out: list[Any] = []
        for e in entries:
            cmd = decode_kv(e.body) if e.magic == MAGIC_NORMAL else None
            out.append(None if cmd is None else self.apply_command(cmd))
            self.last_applied = e.index
        return out

    def get(self, key: str) -> Any:
        """Local read (the unsafe, read-index and lease paths)."""
        return self.data.get(key)

    def on_snapshot_save(self) -> bytes:
        return msgpack.packb({"last_applied": self.last_applied, "data": self.data}, use_bin_type=True)

    def on_snapshot_load(self, data: bytes) -> None:
        snap = self.check_snapshot(data)
        self.data = snap["data"]
        self.last_applied = snap["last_applied"]

    @staticmethod
    def check_snapshot(data: bytes) -> dict[str, Any]:
        """The decoded snapshot ``{"last_applied": int, "data": {str: value}}``; ValueError naming
        what is wrong otherwise (the server checks an INSTALL_SNAPSHOT with it before installing)."""
        try:
            snap = msgpack.unpackb(data, raw=False, strict_map_key=False)
        except Exception as e:
            raise ValueError(f"kv snapshot: not msgpack ({e})") from None
        if not isinstance(snap, dict) or not isinstance(snap.get("data"), dict):
            raise ValueError("kv snapshot: expected a map with 'data'")
        if not all(isinstance(k, str) for k in snap["data"]):
            raise ValueError("kv snapshot: expected string keys")
        last = snap.get("last_applied", -1)
        if type(last) is not int:
            raise ValueError(f"kv snapshot: last_applied {last!r}, expected an int")
        return {"last_applied": last, "data": snap["data"]}

    def on_shutdown(self) -> None:
        pass


_MISSING = object()


def _combine(f: str, key: str, cur: Any, value: Any) -> Any:
    """The value of ``key`` after the micro-op ``[f, key, value]`` (``append``, ``add`` or ``sadd``)
    on ``cur`` (:data:`_MISSING` when absent), or :class:`TxnAborted`."""
    if f == "add":
        base = 0 if cur is _MISSING else cur
        if type(base) is not int:
            return TxnAborted(f"add to {key!r}: its value {cur!r:.40} is not an integer")
        if base + value < 0:
            return TxnAborted(f"add {value} to {key!r}: {base} + {value} would be negative")
        return base + value
    if cur is _MISSING:
        cur = []
    elif not isinstance(cur, list):
        return TxnAborted(f"{f} to {key!r}: its value {cur!r:.40} is not a list")
    if f == "sadd" and value in cur:
        return cur
    return [*cur, value]


def _member(value: Any) -> Any:
    """A hashable stand-in for a msgpack-decoded ``value`` that equals another's exactly when the
    values are equal (``==``, as ``in`` compares them): lists and maps become tagged tuples and
    frozensets, all else (numbers, strings, bytes, None) stands for itself."""
    if isinstance(value, list):
        return ("\x00list", tuple(_member(v) for v in value))
    if isinstance(value, dict):
        return ("\x00map", frozenset((_member(k), _member(v)) for k, v in value.items()))
    return value


def _copy(value: Any) -> Any:
    """A read answers a copy, so a later append cannot change what was answered."""
    return list(value) if isinstance(value, list) else value
